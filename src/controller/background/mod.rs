//! The jobs beside the kinds, not triggered by a tenant's object: backup sync and garbage collection. The kinds'
//! watches hand them work through [`Jobs`](super::jobs::Jobs).

pub mod gc;
pub mod sync;
