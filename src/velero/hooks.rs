//! Velero's hooks and uploader settings, typed as Velero's CRDs declare them, so the API server checks a
//! NonAdminBackup's or NonAdminRestore's hooks as OADP's CRDs make it check them (a hook's `name`, a command of at
//! least one word, `onError` Continue or Fail) and `kubectl explain` shows them. Each struct keeps the fields of a
//! newer Velero in `extra`: what nac reads from Velero round-trips whole.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use macro_rules_attribute::apply;

/// Hooks run while backing up (`BackupSpec.hooks`).
#[apply(crate::wire::velero_spec!)]
pub struct BackupHooks {
    /// Hooks run when backing up individual objects of a resource.
    pub resources: Option<Vec<BackupResourceHookSpec>>,
}

/// Hooks for the objects a namespace, resource and label filter selects.
#[apply(crate::wire::velero_spec!)]
pub struct BackupResourceHookSpec {
    /// The name of this hook.
    pub name: String,
    /// Namespaces this hook applies to (all when empty).
    pub included_namespaces: Option<Vec<String>>,
    /// Namespaces this hook does not apply to.
    pub excluded_namespaces: Option<Vec<String>>,
    /// Resources this hook applies to (all when empty).
    pub included_resources: Option<Vec<String>>,
    /// Resources this hook does not apply to.
    pub excluded_resources: Option<Vec<String>>,
    /// Only objects matching this selector.
    #[schemars(with = "Option<crate::wire::AtomicLabelSelector>")]
    pub label_selector: Option<LabelSelector>,
    /// Hooks run before an object is stored in the backup.
    pub pre: Option<Vec<BackupResourceHook>>,
    /// Hooks run after an object is stored in the backup.
    pub post: Option<Vec<BackupResourceHook>>,
}

/// One backup hook: a command run in a pod's container.
#[apply(crate::wire::velero_spec!)]
pub struct BackupResourceHook {
    pub exec: ExecHook,
}

/// A command run in a container of the pod being backed up.
#[apply(crate::wire::velero_spec!)]
pub struct ExecHook {
    /// The container (the pod's first when empty).
    pub container: Option<String>,
    /// The command and its arguments.
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    /// Continue or Fail: what Velero does when the command fails.
    #[schemars(extend("enum" = ["Continue", "Fail"]))]
    pub on_error: Option<String>,
    /// How long Velero waits for the command (Go duration).
    pub timeout: Option<String>,
}

/// Hooks run while restoring (`RestoreSpec.hooks`).
#[apply(crate::wire::velero_spec!)]
pub struct RestoreHooks {
    /// Hooks run when restoring individual objects of a resource.
    pub resources: Option<Vec<RestoreResourceHookSpec>>,
}

/// Restore hooks for the objects a namespace, resource and label filter selects.
#[apply(crate::wire::velero_spec!)]
pub struct RestoreResourceHookSpec {
    /// The name of this hook.
    pub name: String,
    pub included_namespaces: Option<Vec<String>>,
    pub excluded_namespaces: Option<Vec<String>>,
    pub included_resources: Option<Vec<String>>,
    pub excluded_resources: Option<Vec<String>>,
    #[schemars(with = "Option<crate::wire::AtomicLabelSelector>")]
    pub label_selector: Option<LabelSelector>,
    /// Hooks run after an object is restored.
    pub post_hooks: Option<Vec<RestoreResourceHook>>,
}

/// One restore hook: a command in a restored pod's container, or init containers added to it.
#[apply(crate::wire::velero_spec!)]
pub struct RestoreResourceHook {
    pub exec: Option<ExecRestoreHook>,
    pub init: Option<InitRestoreHook>,
}

/// A command run in a container of a restored pod.
#[apply(crate::wire::velero_spec!)]
pub struct ExecRestoreHook {
    pub container: Option<String>,
    #[schemars(length(min = 1))]
    pub command: Vec<String>,
    #[schemars(extend("enum" = ["Continue", "Fail"]))]
    pub on_error: Option<String>,
    /// How long Velero waits for the command once it started (Go duration).
    pub exec_timeout: Option<String>,
    /// How long Velero waits for the container to be ready (Go duration).
    pub wait_timeout: Option<String>,
    /// Whether Velero waits for the container to be ready before running the command.
    pub wait_for_ready: Option<bool>,
}

/// Init containers added to a restored pod.
#[apply(crate::wire::velero_spec!)]
pub struct InitRestoreHook {
    /// Containers in Kubernetes' container form, passed to Velero as they are.
    #[schemars(with = "Option<crate::wire::OpenObjects>")]
    pub init_containers: Option<Vec<serde_json::Value>>,
    /// How long Velero waits for the init containers (Go duration).
    pub timeout: Option<String>,
}

/// Which resources' status a restore restores too.
#[apply(crate::wire::velero_spec!)]
pub struct RestoreStatusSpec {
    pub included_resources: Option<Vec<String>>,
    pub excluded_resources: Option<Vec<String>>,
}

/// The uploader's settings for a backup.
#[apply(crate::wire::velero_spec!)]
pub struct UploaderConfigForBackup {
    /// How many files the uploader uploads at once.
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub parallel_files_upload: Option<i64>,
}

/// The uploader's settings for a restore.
#[apply(crate::wire::velero_spec!)]
pub struct UploaderConfigForRestore {
    /// Whether files are written sparse.
    pub write_sparse_files: Option<bool>,
    /// How many files the uploader downloads at once.
    #[schemars(with = "Option<crate::wire::GoInt>")]
    pub parallel_files_download: Option<i64>,
}
