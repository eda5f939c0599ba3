//! Events (`events.k8s.io/v1`) as kube's `Recorder` publishes them — the same fields, and a repeat of an Event
//! within six minutes becomes a series on the first one — but remembering only what a series needs. kube's
//! recorder keeps a clone of every Event it published for six minutes (with its key, another copy of the
//! reference) and scans all of them on each publish: one Event per backup, 10,000 backups created within a few
//! minutes. Here a repeat is found by a hash of what makes two Events the same, and the series by name.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::Client;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher, RandomState};
use std::sync::Mutex;

/// A Kubernetes Event to publish on an object after a status transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Note {
    pub warning: bool,
    pub reason: String,
    pub message: String,
}

/// How long a published Event can still grow a series (as kube's recorder and client-go's broadcaster).
const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

/// Publishes Events for one controller instance.
pub struct Recorder {
    client: Client,
    controller: String,
    instance: String,
    hasher: RandomState,
    series: Mutex<Series>,
}

#[derive(Default)]
struct Series {
    /// The last published Event of each note on each object: its name, count and when it was last seen.
    seen: HashMap<u64, Seen>,
    pruned: Option<Timestamp>,
}

struct Seen {
    name: String,
    count: i32,
    last: Timestamp,
}

impl Recorder {
    pub fn new(client: Client, controller: &str, instance: &str) -> Recorder {
        Recorder {
            client,
            controller: controller.to_string(),
            instance: instance.to_string(),
            hasher: RandomState::new(),
            series: Mutex::default(),
        }
    }

    /// Events remembered for a series now (for tests and the memory promise).
    pub fn remembered(&self) -> usize {
        self.series.lock().expect("series lock").seen.len()
    }

    /// Publishes `note` on `regarding`: a new Event, or the next count of the series of the same note on the same
    /// object published within six minutes. A series whose Event is gone (deleted, expired) starts over.
    pub async fn publish(&self, note: &Note, regarding: &ObjectReference) -> Result<(), kube::Error> {
        self.publish_at(note, regarding, Timestamp::now()).await
    }

    /// Publishes `note` on `regarding` as the Event named `name`, once: `false` when an Event of that name exists
    /// (published by this or an earlier leader), so a name derived from what the Event is about makes it one per
    /// occurrence across leaders, without reading Events.
    pub async fn publish_once(
        &self,
        note: &Note,
        regarding: &ObjectReference,
        name: &str,
    ) -> Result<bool, kube::Error> {
        let mut event = self.event(note, regarding, Timestamp::now());
        event.metadata.name = Some(name.to_string());
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn publish_at(&self, note: &Note, regarding: &ObjectReference, now: Timestamp) -> Result<(), kube::Error> {
        let key = self.key(note, regarding);
        let repeat = self.repeat(key, now);
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        if let Some((name, count)) = repeat {
            let series = serde_json::json!({
                "series": {"count": count, "lastObservedTime": MicroTime(now)}
            });
            match api.patch(&name, &PatchParams::default(), &Patch::Merge(&series)).await {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        let event = self.event(note, regarding, now);
        let name = event.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &event).await?;
        self.series.lock().expect("series lock").seen.insert(
            key,
            Seen {
                name,
                count: 1,
                last: now,
            },
        );
        Ok(())
    }

    /// The series' Event name and next count when `key` was published within the TTL (counting this one);
    /// forgets expired series, at most once a minute (a pass over all of them).
    fn repeat(&self, key: u64, now: Timestamp) -> Option<(String, i32)> {
        let mut s = self.series.lock().expect("series lock");
        if s.pruned.is_none_or(|t| t + SignedDuration::from_mins(1) <= now) {
            s.seen.retain(|_, v| v.last + SERIES_TTL > now);
            s.pruned = Some(now);
        }
        let seen = s.seen.get_mut(&key).filter(|v| v.last + SERIES_TTL > now)?;
        // A series counts every occurrence, the first included.
        seen.count += 1;
        seen.last = now;
        Some((seen.name.clone(), seen.count))
    }

    /// Two Events are the same when type, reason, note, controller instance and object are.
    fn key(&self, note: &Note, r: &ObjectReference) -> u64 {
        let mut h = self.hasher.build_hasher();
        (note.warning, &note.reason, &note.message).hash(&mut h);
        (&r.api_version, &r.kind, &r.namespace, &r.name, &r.uid).hash(&mut h);
        h.finish()
    }

    fn event(&self, note: &Note, regarding: &ObjectReference, now: Timestamp) -> Event {
        Event {
            action: Some(note.reason.clone()),
            reason: Some(note.reason.clone()),
            note: Some(truncate(&note.message, 1000)),
            type_: Some(if note.warning { "Warning" } else { "Normal" }.to_string()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.clone()),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(&self.controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

/// At most `max` bytes of `s` (cut at a character boundary, marked with an ellipsis).
fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{Method, Request, Response};
    use kube::client::Body;
    use std::sync::Arc;
    use tower_test::mock;

    type Handle = mock::Handle<Request<Body>, Response<Body>>;

    fn note(reason: &str, message: &str) -> Note {
        Note {
            warning: false,
            reason: reason.into(),
            message: message.into(),
        }
    }

    fn backup(name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some("oadp.openshift.io/v1alpha1".into()),
            kind: Some("NonAdminBackup".into()),
            namespace: Some("tenant".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        }
    }

    /// Answers the next call with `code` (the request's body echoed back); returns method, path and body.
    async fn answer(handle: &mut Handle, code: u16) -> (Method, String, serde_json::Value) {
        let (req, send) = handle.next_request().await.expect("a call");
        let (method, path) = (req.method().clone(), req.uri().path().to_string());
        let bytes = req.into_body().collect_bytes().await.unwrap();
        let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        let reply = if code == 404 {
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404})
        } else {
            let mut e = body.clone();
            e["metadata"]["name"] = e["metadata"]["name"].as_str().map_or("x".into(), Into::into);
            e["metadata"]["namespace"] = "tenant".into();
            e
        };
        let resp = Response::builder()
            .status(code)
            .body(Body::from(serde_json::to_vec(&reply).unwrap()));
        send.send_response(resp.unwrap());
        (method, path, body)
    }

    #[tokio::test]
    async fn a_repeat_within_six_minutes_grows_a_series_and_only_names_are_remembered() {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let r = Arc::new(Recorder::new(kube::Client::new(service, "default"), "nac", "nac-0"));
        let t0 = Timestamp::now();
        let at = |mins: i64| t0 + SignedDuration::from_mins(mins);
        let publish = |n: Note, o: ObjectReference, t: Timestamp| {
            let r = r.clone();
            tokio::spawn(async move { r.publish_at(&n, &o, t).await })
        };

        // First: a new Event with the reporter, the object and the note.
        let p = publish(note("BackupCreated", "made"), backup("b1"), at(0));
        let (m, path, first) = answer(&mut handle, 201).await;
        p.await.unwrap().unwrap();
        assert_eq!(
            (m, path.as_str()),
            (Method::POST, "/apis/events.k8s.io/v1/namespaces/tenant/events")
        );
        assert_eq!(first["reportingController"], "nac");
        assert_eq!(first["reportingInstance"], "nac-0");
        assert_eq!(first["regarding"]["uid"], "uid-b1");
        assert_eq!(
            (first["reason"].as_str(), first["note"].as_str()),
            (Some("BackupCreated"), Some("made"))
        );
        assert_eq!(first["type"], "Normal");
        let name = first["metadata"]["name"].as_str().unwrap().to_string();

        // The same again within six minutes: a series of 2, then 3, on the first Event.
        for count in [2, 3] {
            let p = publish(note("BackupCreated", "made"), backup("b1"), at(count));
            let (m, path, body) = answer(&mut handle, 200).await;
            p.await.unwrap().unwrap();
            assert_eq!(m, Method::PATCH);
            assert_eq!(path, format!("/apis/events.k8s.io/v1/namespaces/tenant/events/{name}"));
            assert_eq!(body["series"]["count"], count);
        }
        // Another note, or another object: new Events.
        for (n, o) in [
            (note("BackupCreated", "other"), backup("b1")),
            (note("BackupCreated", "made"), backup("b2")),
        ] {
            let p = publish(n, o, at(3));
            assert_eq!(answer(&mut handle, 201).await.0, Method::POST);
            p.await.unwrap().unwrap();
        }
        assert_eq!(r.remembered(), 3);
        // Six minutes after it was last seen the series is over: a new Event, and the old ones are forgotten.
        let p = publish(note("BackupCreated", "made"), backup("b1"), at(10));
        assert_eq!(answer(&mut handle, 201).await.0, Method::POST);
        p.await.unwrap().unwrap();
        assert_eq!(r.remembered(), 1);
    }

    #[tokio::test]
    async fn a_series_whose_event_is_gone_starts_over() {
        let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
        let r = Arc::new(Recorder::new(kube::Client::new(service, "default"), "nac", "nac-0"));
        let t0 = Timestamp::now();
        let r1 = r.clone();
        let p = tokio::spawn(async move { r1.publish_at(&note("R", "m"), &backup("b1"), t0).await });
        answer(&mut handle, 201).await;
        p.await.unwrap().unwrap();
        let r1 = r.clone();
        let p = tokio::spawn(async move {
            r1.publish_at(&note("R", "m"), &backup("b1"), t0 + SignedDuration::from_secs(5))
                .await
        });
        assert_eq!(answer(&mut handle, 404).await.0, Method::PATCH);
        let (m, _, body) = answer(&mut handle, 201).await;
        p.await.unwrap().unwrap();
        assert_eq!(m, Method::POST);
        assert!(body.get("series").is_none());
        assert_eq!(r.remembered(), 1);
    }

    #[test]
    fn event_notes_are_cut_to_the_api_limit() {
        let long = "é".repeat(800);
        let t = truncate(&long, 1000);
        assert!(t.len() <= 1004);
        assert!(t.ends_with('…'));
    }
}
