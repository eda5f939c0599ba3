//! A kind's context: the shared core, the term's read-only view, and the kind's own state.

use super::context::Shared;
use super::view::View;
use std::sync::Arc;

/// A kind's context for one term: the [`Shared`] core, the read-only [`View`](View) of every store
/// (what it reads of other kinds), and its own state `S` (its stores, indexes, triggers and waiters). The
/// background jobs run on `Cx<()>`.
pub struct Cx<S> {
    pub shared: Arc<Shared>,
    pub view: Arc<View>,
    pub own: S,
}

impl<S> Cx<S> {
    /// A context on `shared` and `view` with `own` state.
    pub fn new(shared: &Arc<Shared>, view: &Arc<View>, own: S) -> Arc<Self> {
        Arc::new(Cx {
            shared: shared.clone(),
            view: view.clone(),
            own,
        })
    }
}

impl<S> std::ops::Deref for Cx<S> {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.shared
    }
}
