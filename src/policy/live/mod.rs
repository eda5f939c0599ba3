//! The live policy: where it comes from (the policy ConfigMap watched, or a file polled) and the store every
//! reader takes snapshots from. The only part of `policy/` that talks to the cluster.

pub mod namespaces;
pub mod source;
pub mod store;
pub mod usage;

pub use namespaces::NamespaceLabels;
pub use store::{Offer, PolicyState, PolicyStore};
pub use usage::{CountedBackup, UsageIndex};
