//! The reconcile error, shared by every controller and the writes they make.

/// Errors of a reconcile. `Waiting` is not a failure: the object waits for Velero and is polled at a fixed pace.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Waiting(String),
    #[error("{0}")]
    NotReady(String),
    #[error("{0}")]
    Inconsistent(String),
    #[error("{0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
}

impl Error {
    pub fn is_waiting(&self) -> bool {
        use kube::runtime::finalizer::Error as F;
        match self {
            Error::Waiting(_) => true,
            Error::Finalizer(f) => matches!(
                f.as_ref(),
                F::ApplyFailed(Error::Waiting(_)) | F::CleanupFailed(Error::Waiting(_))
            ),
            _ => false,
        }
    }
}

impl From<kube::runtime::finalizer::Error<Error>> for Error {
    fn from(e: kube::runtime::finalizer::Error<Error>) -> Self {
        Error::Finalizer(Box::new(e))
    }
}
