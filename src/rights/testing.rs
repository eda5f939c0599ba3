//! Helpers of the rights modules' unit tests.

use super::Requester;

/// A requester known by name alone.
pub fn user(name: &str) -> Requester {
    Requester {
        username: name.into(),
        ..Default::default()
    }
}

/// One denied question of a [`super::Fixed`] table: user, verb, target.
pub fn deny(u: &str, verb: &str, target: &str) -> (String, String, String) {
    (u.into(), verb.into(), target.into())
}
