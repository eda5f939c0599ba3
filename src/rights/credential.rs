//! A tenant's storage location hands Velero the Secret its `credential` names: nac copies it into Velero's
//! namespace with its own rights, so it does so only for a location whose requester (who created it, recorded by
//! nac's webhook) may `get` that Secret themselves. Asked at admission and again before any copy is made.

use super::{Access, Question, Requester, RightsMode};

/// `get` on Secret `name` in `namespace`.
pub fn question(namespace: &str, name: &str) -> Question {
    Question {
        verb: "get".into(),
        resource: "secrets".into(),
        name: name.into(),
        namespace: namespace.into(),
        ..Default::default()
    }
}

const KIND: &str = "NonAdminBackupStorageLocation";
/// The field naming the Secret, for messages.
pub const FIELD: &str = "spec.backupStorageLocationSpec.credential.name";

/// Whether the location's credential may be used under `mode` (`rights.locations`): `Ok(Err(why))` when not,
/// with a message naming the user, the verb, the Secret and the namespace; `Err` when the answer could not be
/// had (retry). `who` is the recorded requester (none: the location did not pass nac's webhook).
pub async fn check(
    access: &dyn Access,
    who: Option<&Requester>,
    namespace: &str,
    secret: &str,
    mode: RightsMode,
) -> Result<Result<(), String>, String> {
    if mode == RightsMode::Off {
        return Ok(Ok(()));
    }
    let Some(who) = who else {
        let what = format!("whether its requester may read Secret {secret:?}");
        return Ok(Err(super::no_requester(KIND, &what, Some(("rights.locations", mode)))));
    };
    if access.ask(who, &question(namespace, secret)).await? {
        return Ok(Ok(()));
    }
    Ok(Err(refusal(&who.username, namespace, secret, mode)))
}

/// The refusal of a location whose requester may not read its credential.
pub fn refusal(user: &str, namespace: &str, secret: &str, mode: RightsMode) -> String {
    format!(
        "{KIND} refused: {user} may not get Secret {secret:?} in namespace {namespace}, which {FIELD} names: nac \
         hands Velero a location's credential only when its requester may read it (policy rights.locations: \
         {mode})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rights::testing::user;
    use crate::rights::Fixed;

    #[tokio::test]
    async fn a_requester_who_may_not_get_the_secret_is_refused_by_name() {
        let mut access = Fixed::common();
        access.denied = vec![("viewer".into(), "get".into(), "secrets/app-key".into())];
        let ok = check(&access, Some(&user("owner")), "team-a", "app-key", RightsMode::Deny).await;
        assert_eq!(ok, Ok(Ok(())));
        // Another Secret of the same namespace: allowed (the question names the Secret).
        let other = check(&access, Some(&user("viewer")), "team-a", "mine", RightsMode::Deny).await;
        assert_eq!(other, Ok(Ok(())));
        let no = check(&access, Some(&user("viewer")), "team-a", "app-key", RightsMode::Deny)
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(
            no,
            "NonAdminBackupStorageLocation refused: viewer may not get Secret \"app-key\" in namespace team-a, which \
             spec.backupStorageLocationSpec.credential.name names: nac hands Velero a location's credential only \
             when its requester may read it (policy rights.locations: deny)"
        );
        // Off: not asked.
        let off = check(&access, Some(&user("viewer")), "team-a", "app-key", RightsMode::Off).await;
        assert_eq!(off, Ok(Ok(())));
        // No record of the requester: refused, saying why; a failed answer is an error to retry.
        let none = check(&access, None, "team-a", "app-key", RightsMode::Deny)
            .await
            .unwrap()
            .unwrap_err();
        assert!(none.contains("has no record of who created it"), "{none}");
        assert!(
            check(&access, Some(&user("broken")), "team-a", "app-key", RightsMode::Deny)
                .await
                .is_err()
        );
        assert_eq!(question("team-a", "app-key").target(), "secrets/app-key");
    }
}
