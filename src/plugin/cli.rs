//! The command line: `kubectl nac backup|restore|schedule <verb>`, and what each verb does.

use super::download::{self, Tls};
use super::kinds::{Kind, BACKUP, LOCATION, RESTORE, SCHEDULE};
use super::show::{self, Output};
use super::{admin, manifest, object, print_warnings, wait, Error, Result, Session};
use clap::{Args, Parser, Subcommand};
use serde_json::{json, Map, Value};

#[derive(Parser, Debug)]
#[command(
    name = "kubectl-nac",
    bin_name = "kubectl nac",
    version,
    about = "Back up and restore your namespace with Velero, through nac: no cluster rights needed",
    long_about = "Back up and restore your namespace with Velero, through nac (the non-admin controller). Every \
                  command works with your own kubeconfig and your rights in the namespace: it creates, reads and \
                  deletes nac's objects there (NonAdminBackup, NonAdminRestore, NonAdminSchedule), and the cluster \
                  admin's policy decides what they may do. Cluster admins use it too: `bsl-request` to approve or \
                  reject tenants' own storage locations, `backup get -A` and `restore get -A` for every namespace."
)]
pub struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    command: Command,
}

#[derive(Args, Debug, Default)]
pub struct Global {
    /// The namespace (default: the kubeconfig context's)
    #[arg(short = 'n', long, global = true)]
    pub namespace: Option<String>,
    /// The kubeconfig context to use
    #[arg(long, global = true)]
    pub context: Option<String>,
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<std::path::PathBuf>,
    /// Act as this user (impersonation, as kubectl --as)
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act with this group (impersonation, as kubectl --as-group; repeatable)
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_groups: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Work with backups
    Backup {
        #[command(subcommand)]
        verb: BackupVerb,
    },
    /// Work with restores
    Restore {
        #[command(subcommand)]
        verb: RestoreVerb,
    },
    /// Work with schedules
    Schedule {
        #[command(subcommand)]
        verb: ScheduleVerb,
    },
    /// Work with your own backup storage locations (buckets), which the cluster admin approves
    Bsl {
        #[command(subcommand)]
        verb: BslVerb,
    },
    /// Cluster admins: tenants' requests for their own storage locations (approve, reject)
    #[command(name = "bsl-request")]
    BslRequest {
        /// Velero's namespace, where nac keeps the requests
        #[arg(long, default_value = "openshift-adp", value_name = "NAMESPACE")]
        velero_namespace: String,
        #[command(subcommand)]
        verb: RequestVerb,
    },
    /// Show the namespace's policy tier, each quota's use and limit, and its newest completed backup
    Status,
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish)
    Completion { shell: clap_complete::Shell },
}

#[derive(Subcommand, Debug)]
enum RequestVerb {
    /// List requests (NAME: the request, NAMESPACE/LOCATION or a location's name)
    Get {
        names: Vec<String>,
        /// Only those waiting for a decision
        #[arg(long)]
        pending: bool,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Show what requests ask for
    Describe {
        names: Vec<String>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// Approve a request: nac makes the tenant's Velero storage location
    Approve {
        name: String,
        /// Why, recorded on the request
        #[arg(long)]
        reason: Option<String>,
    },
    /// Reject a request: the tenant's location stays unusable
    Reject {
        name: String,
        /// Why, recorded on the request
        #[arg(long)]
        reason: Option<String>,
    },
}

/// What a backup or restore selects (velero's resource filters and label selectors).
#[derive(Args, Debug, Default, Clone)]
struct Filters {
    /// Resources to include (comma-separated; default: all)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    include_resources: Vec<String>,
    /// Resources to exclude (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    exclude_resources: Vec<String>,
    /// Only objects matching this label selector (k=v, k!=v, k, !k, comma-separated)
    #[arg(short = 'l', long, value_name = "SELECTOR", conflicts_with = "or_selector")]
    selector: Option<String>,
    /// Objects matching at least one of these label selectors, separated by " or " (e.g. "app=web or tier=db")
    #[arg(long, value_name = "SELECTORS")]
    or_selector: Option<String>,
    /// Namespaces to include: only your own is allowed (nac fills it in)
    #[arg(long, value_delimiter = ',', value_name = "NAMESPACES")]
    include_namespaces: Vec<String>,
    /// Include cluster-scoped resources: nac allows only false
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    include_cluster_resources: Option<bool>,
}

impl Filters {
    /// Adds the filters to a Velero BackupSpec or RestoreSpec. What nac forbids is sent all the same, so nac's
    /// refusal says why.
    fn add_to(&self, spec: &mut Map<String, Value>) -> Result<()> {
        if !self.include_resources.is_empty() {
            spec.insert("includedResources".into(), json!(self.include_resources));
        }
        if !self.exclude_resources.is_empty() {
            spec.insert("excludedResources".into(), json!(self.exclude_resources));
        }
        if let Some(sel) = &self.selector {
            spec.insert("labelSelector".into(), parse_selector(sel)?);
        }
        if let Some(sels) = &self.or_selector {
            let list = sels
                .split(" or ")
                .map(|s| parse_selector(s.trim()))
                .collect::<Result<Vec<_>>>()?;
            spec.insert("orLabelSelectors".into(), Value::Array(list));
        }
        if !self.include_namespaces.is_empty() {
            spec.insert("includedNamespaces".into(), json!(self.include_namespaces));
        }
        if let Some(b) = self.include_cluster_resources {
            spec.insert("includeClusterResources".into(), json!(b));
        }
        Ok(())
    }
}

/// Labels and annotations of the object itself (`--labels`, `--annotations`).
#[derive(Args, Debug, Default, Clone)]
struct ObjectMeta {
    /// Labels of the object, k=v comma-separated
    #[arg(long, value_delimiter = ',', value_name = "K=V")]
    labels: Vec<String>,
    /// Annotations of the object, k=v comma-separated
    #[arg(long, value_delimiter = ',', value_name = "K=V")]
    annotations: Vec<String>,
}

impl ObjectMeta {
    /// Puts them on `object`'s metadata; nac's own labels and annotations are nac's to set, and its webhook says so.
    fn add_to(&self, object: &mut Value) -> Result<()> {
        for (field, flag, pairs) in [
            ("labels", "--labels", &self.labels),
            ("annotations", "--annotations", &self.annotations),
        ] {
            let map = key_values(flag, pairs)?;
            if !map.is_empty() {
                object["metadata"][field] = Value::Object(map);
            }
        }
        Ok(())
    }
}

/// `k=v` pairs as a JSON map.
fn key_values(flag: &str, pairs: &[String]) -> Result<Map<String, Value>> {
    let mut map = Map::new();
    for kv in pairs.iter().filter(|p| !p.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| Error::User(format!("{flag} {kv:?}: expected key=value")))?;
        map.insert(k.trim().into(), json!(v.trim()));
    }
    Ok(map)
}

/// The settings of a backup (`velero backup create`'s).
#[derive(Args, Debug, Default, Clone)]
struct BackupFlags {
    #[command(flatten)]
    filters: Filters,
    /// Namespace-scoped resources to include (comma-separated; not with --include-resources/--exclude-resources)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    include_namespace_scoped_resources: Vec<String>,
    /// Namespace-scoped resources to exclude (comma-separated; not with --include-resources/--exclude-resources)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    exclude_namespace_scoped_resources: Vec<String>,
    /// Cluster-scoped resources to include: nac allows none
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    include_cluster_scoped_resources: Vec<String>,
    /// Cluster-scoped resources to exclude (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    exclude_cluster_scoped_resources: Vec<String>,
    /// Back up these objects of a kind first, in this order: kind=ns/name,ns/name;kind=... (e.g.
    /// "pods=team-a/db-0,team-a/db-1;persistentvolumeclaims=team-a/data")
    #[arg(long, value_name = "ORDER")]
    ordered_resources: Option<String>,
    /// How long the backup is kept (Go duration, e.g. 720h0m0s); the cluster policy may set or bound it
    #[arg(long)]
    ttl: Option<String>,
    /// Your NonAdminBackupStorageLocation, or a location the admin opened (default: the cluster's default)
    #[arg(long, value_name = "NAME")]
    storage_location: Option<String>,
    /// Volume snapshot locations: nac allows none (snapshots go where the admin configured)
    #[arg(long, value_delimiter = ',', value_name = "NAMES")]
    volume_snapshot_locations: Vec<String>,
    /// Take snapshots of persistent volumes
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    snapshot_volumes: Option<bool>,
    /// Move CSI snapshot data to the backup storage (data mover)
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    snapshot_move_data: Option<bool>,
    /// The data mover to use (default: Velero's built-in)
    #[arg(long, value_name = "NAME")]
    data_mover: Option<String>,
    /// Back up all pod volumes with the file system backup
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    default_volumes_to_fs_backup: Option<bool>,
    /// How long to wait for CSI snapshots to be ready (Go duration)
    #[arg(long, value_name = "DURATION")]
    csi_snapshot_timeout: Option<String>,
    /// How long to wait for asynchronous plugin operations (Go duration)
    #[arg(long, value_name = "DURATION")]
    item_operation_timeout: Option<String>,
}

impl BackupFlags {
    fn spec(&self) -> Result<Value> {
        let mut spec = Map::new();
        self.filters.add_to(&mut spec)?;
        let new_style = [
            (
                "includedNamespaceScopedResources",
                &self.include_namespace_scoped_resources,
            ),
            (
                "excludedNamespaceScopedResources",
                &self.exclude_namespace_scoped_resources,
            ),
            ("includedClusterScopedResources", &self.include_cluster_scoped_resources),
            ("excludedClusterScopedResources", &self.exclude_cluster_scoped_resources),
        ];
        let old_style = !self.filters.include_resources.is_empty()
            || !self.filters.exclude_resources.is_empty()
            || self.filters.include_cluster_resources.is_some();
        if old_style && new_style.iter().any(|(_, v)| !v.is_empty()) {
            // Velero refuses a spec mixing the two.
            return Err(Error::User(
                "--include-resources, --exclude-resources and --include-cluster-resources cannot be used with the \
                 scoped filters (--include/--exclude-namespace-scoped-resources, \
                 --include/--exclude-cluster-scoped-resources)"
                    .into(),
            ));
        }
        for (key, v) in new_style {
            if !v.is_empty() {
                spec.insert(key.into(), json!(v));
            }
        }
        if let Some(order) = &self.ordered_resources {
            spec.insert("orderedResources".into(), parse_ordered_resources(order)?);
        }
        if !self.volume_snapshot_locations.is_empty() {
            spec.insert("volumeSnapshotLocations".into(), json!(self.volume_snapshot_locations));
        }
        for (key, v) in [
            ("ttl", &self.ttl),
            ("storageLocation", &self.storage_location),
            ("datamover", &self.data_mover),
            ("csiSnapshotTimeout", &self.csi_snapshot_timeout),
            ("itemOperationTimeout", &self.item_operation_timeout),
        ] {
            if let Some(v) = v {
                spec.insert(key.into(), json!(v));
            }
        }
        for (key, v) in [
            ("snapshotVolumes", self.snapshot_volumes),
            ("snapshotMoveData", self.snapshot_move_data),
            ("defaultVolumesToFsBackup", self.default_volumes_to_fs_backup),
        ] {
            if let Some(v) = v {
                spec.insert(key.into(), json!(v));
            }
        }
        Ok(Value::Object(spec))
    }

    /// Whether any flag shapes the backup's spec (`--from-schedule` takes the schedule's as it is).
    fn shapes_spec(&self) -> bool {
        self.spec()
            .map_or(true, |s| s.as_object().is_some_and(|m| !m.is_empty()))
    }
}

/// `--ordered-resources` (`kind=ns/name,ns/name;kind=...`) as Velero's `orderedResources` map.
fn parse_ordered_resources(text: &str) -> Result<Value> {
    let mut map = Map::new();
    for entry in text.split(';').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.split_once('=') {
            Some((kind, order)) if !kind.trim().is_empty() && !order.trim().is_empty() && !order.contains('=') => {
                map.insert(kind.trim().into(), json!(order.trim()));
            }
            _ => {
                return Err(Error::User(format!(
                    "--ordered-resources {entry:?}: expected kind=namespace/name,namespace/name"
                )))
            }
        }
    }
    Ok(Value::Object(map))
}

/// An equality-based label selector (`app=web,tier!=db,debug,!skip`) as a Kubernetes LabelSelector.
pub fn parse_selector(text: &str) -> Result<Value> {
    let mut labels = Map::new();
    let mut exprs = Vec::new();
    for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let bad = || {
            Error::User(format!(
                "label selector {text:?}: cannot read {part:?} (use k=v, k!=v, k or !k)"
            ))
        };
        let valid = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c));
        if let Some((k, v)) = part.split_once("!=") {
            let (k, v) = (k.trim(), v.trim());
            if !valid(k) || !(v.is_empty() || valid(v)) {
                return Err(bad());
            }
            exprs.push(json!({"key": k, "operator": "NotIn", "values": [v]}));
        } else if let Some((k, v)) = part.split_once("==").or_else(|| part.split_once('=')) {
            let (k, v) = (k.trim(), v.trim());
            if !valid(k) || !(v.is_empty() || valid(v)) {
                return Err(bad());
            }
            labels.insert(k.into(), json!(v));
        } else if let Some(k) = part.strip_prefix('!') {
            if !valid(k.trim()) {
                return Err(bad());
            }
            exprs.push(json!({"key": k.trim(), "operator": "DoesNotExist"}));
        } else {
            if !valid(part) {
                return Err(bad());
            }
            exprs.push(json!({"key": part, "operator": "Exists"}));
        }
    }
    let mut sel = Map::new();
    if !labels.is_empty() {
        sel.insert("matchLabels".into(), Value::Object(labels));
    }
    if !exprs.is_empty() {
        sel.insert("matchExpressions".into(), Value::Array(exprs));
    }
    Ok(Value::Object(sel))
}

#[derive(Args, Debug)]
struct GetArgs {
    /// Names (default: all in the namespace)
    names: Vec<String>,
    /// Only objects with these labels
    #[arg(short = 'l', long)]
    selector: Option<String>,
    #[arg(short = 'o', long, value_enum, default_value_t)]
    output: Output,
}

/// `get` of the kinds a cluster admin may list across namespaces (backups, restores).
#[derive(Args, Debug)]
struct GetAcross {
    #[command(flatten)]
    args: GetArgs,
    #[command(flatten)]
    all: AllNamespaces,
}

/// A cluster admin's view of every namespace's backups or restores.
#[derive(Args, Debug)]
struct AllNamespaces {
    /// Every namespace's (cluster admins; needs list rights cluster-wide)
    #[arg(short = 'A', long, conflicts_with = "names")]
    all_namespaces: bool,
    /// With -A: only those in this phase (e.g. Completed, Failed, InProgress, BackingOff)
    #[arg(long, requires = "all_namespaces")]
    phase: Option<String>,
    /// With -A: only backups to this storage location
    #[arg(long, requires = "all_namespaces", value_name = "NAME")]
    storage_location: Option<String>,
}

#[derive(Args, Debug)]
struct DescribeArgs {
    /// Names (default: all in the namespace)
    names: Vec<String>,
    #[arg(short = 'o', long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Args, Debug)]
struct CreateOut {
    /// Wait until Velero is done, showing progress
    #[arg(short = 'w', long)]
    wait: bool,
    #[arg(short = 'o', long, value_enum, default_value_t)]
    output: Output,
}

#[derive(Subcommand, Debug)]
enum BackupVerb {
    /// Back up the namespace
    Create {
        /// Name (required unless --from-schedule, then default: <schedule>-<timestamp>)
        #[arg(required_unless_present = "from_schedule")]
        name: Option<String>,
        #[command(flatten)]
        flags: BackupFlags,
        /// Back up with the template of your NonAdminSchedule NAME (no other spec flags with it)
        #[arg(long, value_name = "SCHEDULE")]
        from_schedule: Option<String>,
        #[command(flatten)]
        meta: ObjectMeta,
        #[command(flatten)]
        out: CreateOut,
    },
    /// List backups
    Get(GetAcross),
    /// Show backups in detail
    Describe {
        #[command(flatten)]
        args: DescribeArgs,
        /// Also list the resources in the backup (downloaded through a NonAdminDownloadRequest)
        #[arg(long)]
        details: bool,
        #[command(flatten)]
        tls: Tls,
    },
    /// Print a backup's log
    Logs {
        name: String,
        #[command(flatten)]
        tls: Tls,
    },
    /// The manifest of a finished backup (Velero's backup-manifest design): every item by kind, namespace and
    /// name, with owners; read from its contents through a NonAdminDownloadRequest
    Manifest {
        name: String,
        /// tree (default) or json (the design's manifest.json)
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: ManifestOutput,
        /// Write manifest.json to this file instead of printing
        #[arg(long, value_name = "FILE")]
        file: Option<std::path::PathBuf>,
        #[command(flatten)]
        tls: Tls,
    },
    /// A dry run: the manifest a backup with these filters would have now (the cluster policy and your rights
    /// applied, as for a real backup)
    Preview {
        #[command(flatten)]
        flags: BackupFlags,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: ManifestOutput,
        /// Write manifest.json to this file instead of printing
        #[arg(long, value_name = "FILE")]
        file: Option<std::path::PathBuf>,
    },
    /// What two backups (or manifest.json files, e.g. of a preview) both hold, and what only one does
    Diff {
        a: String,
        b: String,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: ManifestOutput,
        #[command(flatten)]
        tls: Tls,
    },
    /// Delete backups: the NonAdminBackup only, or with --data the backup in object storage too
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
        /// Also delete the backup's data in object storage (spec.deleteBackup)
        #[arg(long)]
        data: bool,
    },
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
enum ManifestOutput {
    #[default]
    Tree,
    Json,
}

/// Prints a manifest (or writes its manifest.json).
fn put_manifest(m: &crate::manifest::Manifest, output: ManifestOutput, file: Option<&std::path::Path>) -> Result<()> {
    let json = || serde_json::to_string_pretty(m).map_err(|e| Error::User(e.to_string()));
    match (file, output) {
        (Some(f), _) => {
            std::fs::write(f, json()? + "\n").map_err(|e| Error::User(format!("writing {}: {e}", f.display())))?;
            eprintln!("{} items written to {}", m.len(), f.display());
        }
        (None, ManifestOutput::Json) => println!("{}", json()?),
        (None, ManifestOutput::Tree) => print!("{}", manifest::tree(m)),
    }
    Ok(())
}

/// What a restore does, as `restore create` and `restore preview` take it.
#[derive(Args, Debug)]
struct RestoreFlags {
    #[command(flatten)]
    filters: Filters,
    /// Restore persistent volumes from snapshots
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    restore_volumes: Option<bool>,
    /// Keep the node ports of Services
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    preserve_nodeports: Option<bool>,
    /// What to do with objects that already exist: none (default) or update
    #[arg(long, value_name = "POLICY")]
    existing_resource_policy: Option<String>,
    /// How long to wait for asynchronous plugin operations (Go duration)
    #[arg(long, value_name = "DURATION")]
    item_operation_timeout: Option<String>,
    /// Restore a copy into another namespace where you may restore: THIS:OTHER (only the restore's own
    /// namespace maps, to one other; the admin's policy must allow copies for both)
    #[arg(long, value_delimiter = ',', value_name = "SRC:DST")]
    namespace_mappings: Vec<String>,
}

impl RestoreFlags {
    /// Adds the flags to a Velero RestoreSpec.
    fn add_to(self, spec: &mut Map<String, Value>) -> Result<()> {
        self.filters.add_to(spec)?;
        for (key, v) in [
            ("restorePVs", self.restore_volumes),
            ("preserveNodePorts", self.preserve_nodeports),
        ] {
            if let Some(v) = v {
                spec.insert(key.into(), json!(v));
            }
        }
        for (key, v) in [
            ("existingResourcePolicy", self.existing_resource_policy),
            ("itemOperationTimeout", self.item_operation_timeout),
        ] {
            if let Some(v) = v {
                spec.insert(key.into(), json!(v));
            }
        }
        let mappings = self
            .namespace_mappings
            .iter()
            .filter(|m| !m.is_empty())
            .map(|m| {
                m.split_once(':')
                    .map(|(a, b)| (a.trim().to_string(), json!(b.trim())))
                    .ok_or_else(|| Error::User(format!("--namespace-mappings {m:?}: expected src:dst")))
            })
            .collect::<Result<Map<String, Value>>>()?;
        if !mappings.is_empty() {
            spec.insert("namespaceMapping".into(), Value::Object(mappings));
        }
        Ok(())
    }
}

// Parsed once per command line: the size of the flags' variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum RestoreVerb {
    /// Restore from a backup of this namespace
    Create {
        /// Name (default: <backup>-<timestamp>)
        name: Option<String>,
        /// The NonAdminBackup to restore from
        #[arg(long, value_name = "BACKUP", required_unless_present = "from_schedule")]
        from_backup: Option<String>,
        /// Velero's restore from a schedule's latest backup: nac restores a NonAdminBackup, so it refuses this
        #[arg(long, value_name = "SCHEDULE", conflicts_with = "from_backup")]
        from_schedule: Option<String>,
        #[command(flatten)]
        flags: RestoreFlags,
        #[command(flatten)]
        meta: ObjectMeta,
        #[command(flatten)]
        out: CreateOut,
    },
    /// Show what a restore from a backup would do, without doing it: per kind, the objects it would create, skip
    /// or update, and those it would leave out and why
    Preview {
        /// The NonAdminBackup to restore from
        backup: String,
        #[command(flatten)]
        flags: RestoreFlags,
        /// How long to wait for nac's answer (Go duration)
        #[arg(long, value_name = "DURATION", default_value = "5m")]
        timeout: String,
    },
    /// List restores
    Get(GetAcross),
    /// Show restores in detail
    Describe(DescribeArgs),
    /// Print a restore's log
    Logs {
        name: String,
        #[command(flatten)]
        tls: Tls,
    },
    /// Delete restores (the restored objects stay)
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
enum BslVerb {
    /// Ask for a backup storage location in your own bucket (the cluster admin may have to approve it)
    Create {
        name: String,
        /// The object store's plugin (aws for S3 and S3-compatible stores)
        #[arg(long)]
        provider: String,
        #[arg(long)]
        bucket: String,
        /// Where in the bucket (nac puts it under a prefix of your namespace)
        #[arg(long)]
        prefix: Option<String>,
        /// Provider settings, k=v comma-separated (e.g. region=eu-west-1,s3Url=https://...)
        #[arg(long, value_delimiter = ',', value_name = "K=V")]
        config: Vec<String>,
        /// An existing Secret of your namespace holding the credentials, as SECRET=KEY
        #[arg(long, value_name = "SECRET=KEY", conflicts_with = "credential_file")]
        credential: Option<String>,
        /// A credentials file: stored in a new Secret <name>-credentials, key cloud
        #[arg(long, value_name = "FILE")]
        credential_file: Option<std::path::PathBuf>,
        /// PEM file of the CA of the object store's certificate
        #[arg(long = "storage-cacert", value_name = "FILE")]
        cacert: Option<std::path::PathBuf>,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// List your backup storage locations
    Get(GetArgs),
    /// Show backup storage locations in detail
    Describe(DescribeArgs),
    /// Delete backup storage locations (and a credentials Secret the plugin made for one)
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// Label on a credentials Secret the plugin made for a location (deleted with it).
const MADE_FOR_LOCATION: &str = "nac.oadp.openshift.io/credentials-for";

// Parsed once per command line: the size of the flags' variant does not matter.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
enum ScheduleVerb {
    /// Schedule backups of the namespace
    Create {
        name: String,
        /// When: a cron expression ("0 2 * * *", UTC) or @daily, @every 6h, ...
        #[arg(long)]
        schedule: String,
        /// Create it paused
        #[arg(long)]
        paused: bool,
        /// Set spec.skipImmediately (one-shot). A new schedule is never due at creation, so this only records a
        /// skip; it matters when an overdue schedule is unpaused (`schedule unpause --skip-immediately`)
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        skip_immediately: Option<bool>,
        #[command(flatten)]
        flags: BackupFlags,
        #[command(flatten)]
        meta: ObjectMeta,
        #[arg(short = 'o', long, value_enum, default_value_t)]
        output: Output,
    },
    /// List schedules
    Get(GetArgs),
    /// Show schedules in detail
    Describe(DescribeArgs),
    /// Pause schedules: no new runs
    Pause {
        #[arg(required = true)]
        names: Vec<String>,
    },
    /// Unpause schedules; an overdue one runs at once unless --skip-immediately
    Unpause {
        #[arg(required = true)]
        names: Vec<String>,
        /// Skip the run that is due at once (default: the schedule's, then the cluster policy's)
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        skip_immediately: Option<bool>,
    },
    /// Delete schedules (the backups they made stay)
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

pub async fn dispatch(cli: Cli) -> Result<()> {
    if let Command::Completion { shell } = cli.command {
        let mut cmd = <Cli as clap::CommandFactory>::command();
        clap_complete::generate(shell, &mut cmd, "kubectl-nac", &mut std::io::stdout());
        return Ok(());
    }
    let s = Session::connect(&cli.global).await?;
    match cli.command {
        Command::Backup { verb } => backup(&s, verb).await,
        Command::Restore { verb } => restore(&s, verb).await,
        Command::Schedule { verb } => schedule(&s, verb).await,
        Command::Bsl { verb } => bsl(&s, verb).await,
        Command::BslRequest { velero_namespace, verb } => {
            let ns = velero_namespace.as_str();
            match verb {
                RequestVerb::Get { names, pending, output } => admin::get(&s, ns, &names, pending, output).await,
                RequestVerb::Describe { names, output } => admin::describe(&s, ns, &names, output).await,
                RequestVerb::Approve { name, reason } => {
                    admin::decide(&s, ns, &name, "approve", reason.as_deref()).await
                }
                RequestVerb::Reject { name, reason } => admin::decide(&s, ns, &name, "reject", reason.as_deref()).await,
            }
        }
        Command::Status => super::status::status(&s).await,
        Command::Completion { .. } => Ok(()),
    }
}

/// Creates an object and says so as Velero does, then waits when asked.
async fn create(s: &Session, kind: &Kind, name: &str, spec: Value, meta: &ObjectMeta, out: &CreateOut) -> Result<()> {
    let mut o = object(kind, name, spec);
    meta.add_to(&mut o)?;
    let (made, warnings) = s.create(kind, &o).await?;
    print_warnings(&warnings);
    let made = if out.wait {
        wait::until_settled(s, kind, name).await?
    } else {
        made
    };
    match out.output {
        Output::Table => {
            if !out.wait {
                println!(
                    "{} request \"{name}\" submitted successfully.\nRun `kubectl nac {} describe {name}` or `kubectl nac {} logs {name}` for more details.",
                    capitalised(kind.noun),
                    kind.noun,
                    kind.noun
                );
            } else {
                println!("{} {name}: {}", capitalised(kind.noun), kind.phase(&made));
            }
        }
        o => print!("{}", show::structured(std::slice::from_ref(&made), o)?),
    }
    if out.wait && !matches!(kind.phase(&made), "Completed") {
        return Err(Error::Api(format!(
            "{} {name} ended {}{}",
            kind.noun,
            kind.phase(&made),
            why(&made)
        )));
    }
    Ok(())
}

/// The message of a False Accepted condition, or of a failure, for a one-line reason.
fn why(o: &Value) -> String {
    let reason = o["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Accepted" && c["status"] == "False")
        .and_then(|c| c["message"].as_str())
        .map(str::to_string);
    match reason {
        Some(r) => format!(": {r}"),
        None => String::new(),
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

async fn get(s: &Session, kind: &Kind, across: &GetAcross, table: fn(&[Value]) -> String) -> Result<()> {
    let GetAcross { args, all } = across;
    if all.all_namespaces {
        let items = admin::list_all(
            s,
            kind,
            args.selector.as_deref(),
            all.phase.as_deref(),
            all.storage_location.as_deref(),
        )
        .await?;
        match args.output {
            Output::Table if items.is_empty() => eprintln!("No {}s found in any namespace.", kind.noun),
            Output::Table => print!("{}", show::with_namespace_column(&items, &table(&items))),
            o => print!("{}", show::structured(&items, o)?),
        }
        return Ok(());
    }
    get_in(s, kind, args, table).await
}

async fn get_in(s: &Session, kind: &Kind, args: &GetArgs, table: fn(&[Value]) -> String) -> Result<()> {
    let items = s.some_or_all(kind, &args.names, args.selector.as_deref()).await?;
    match args.output {
        Output::Table if items.is_empty() => eprintln!("No {}s found in namespace {}.", kind.noun, s.namespace),
        Output::Table => print!("{}", table(&items)),
        o => print!("{}", show::structured(&items, o)?),
    }
    Ok(())
}

async fn delete_all(s: &Session, kind: &Kind, names: &[String], said: &str) -> Result<()> {
    for n in names {
        s.delete(kind, n).await?;
        println!("Request to delete {} \"{n}\" submitted successfully.{said}", kind.noun);
    }
    Ok(())
}

async fn backup(s: &Session, verb: BackupVerb) -> Result<()> {
    match verb {
        BackupVerb::Create {
            name,
            flags,
            from_schedule,
            meta,
            out,
        } => {
            let (name, spec) = match from_schedule {
                Some(schedule) => {
                    if flags.shapes_spec() {
                        return Err(Error::User(
                            "--from-schedule takes the schedule's template as it is: no other backup flags with it"
                                .into(),
                        ));
                    }
                    let nas = s.get(&SCHEDULE, &schedule).await?;
                    let spec = nas["spec"]["template"]["backupSpec"].clone();
                    let name = name
                        .unwrap_or_else(|| format!("{schedule}-{}", jiff::Timestamp::now().strftime("%Y%m%d%H%M%S")));
                    (name, if spec.is_object() { spec } else { json!({}) })
                }
                None => (name.unwrap_or_default(), flags.spec()?),
            };
            // A backup still running over the same items is worth knowing of before a second one queues.
            match manifest::overlaps(s, &spec).await {
                Ok(w) => print_warnings(&w),
                Err(e) => eprintln!("Warning: the overlap with running backups could not be checked: {e}"),
            }
            create(s, &BACKUP, &name, json!({ "backupSpec": spec }), &meta, &out).await
        }
        BackupVerb::Manifest {
            name,
            output,
            file,
            tls,
        } => put_manifest(&manifest::of_backup(s, &name, &tls).await?, output, file.as_deref()),
        BackupVerb::Preview { flags, output, file } => {
            let (m, warnings) = manifest::preview(s, flags.spec()?).await?;
            print_warnings(&warnings);
            put_manifest(&m, output, file.as_deref())
        }
        BackupVerb::Diff { a, b, output, tls } => {
            let (ma, mb) = (manifest::load(s, &a, &tls).await?, manifest::load(s, &b, &tls).await?);
            let d = crate::manifest::diff(&ma, &mb);
            match output {
                ManifestOutput::Json => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&d).map_err(|e| Error::User(e.to_string()))?
                    )
                }
                ManifestOutput::Tree => print!("{}", manifest::diff_text(&a, &b, &d)),
            }
            Ok(())
        }
        BackupVerb::Get(g) => get(s, &BACKUP, &g, |i| show::backups(i, &BACKUP)).await,
        BackupVerb::Describe { args, details, tls } => {
            let items = s.some_or_all(&BACKUP, &args.names, None).await?;
            if args.output != Output::Table {
                print!("{}", show::structured(&items, args.output)?);
                return Ok(());
            }
            for (i, o) in items.iter().enumerate() {
                let name = o["metadata"]["name"].as_str().unwrap_or_default();
                let finished = matches!(BACKUP.phase(o), "Completed" | "PartiallyFailed");
                let resources = if details && finished {
                    Some(download::json(s, "BackupResourceList", name, &tls).await?)
                } else {
                    None
                };
                if i > 0 {
                    println!();
                }
                print!("{}", show::describe_backup(o, &BACKUP, resources.as_ref()));
            }
            Ok(())
        }
        BackupVerb::Logs { name, tls } => logs(s, "BackupLog", &name, &tls).await,
        BackupVerb::Delete { names, data } => {
            if !data {
                return delete_all(
                    s,
                    &BACKUP,
                    &names,
                    " The backup's data stays in object storage, so backup sync may bring the backup back where the \
                     cluster policy syncs its location: use --data to delete it for good.",
                )
                .await;
            }
            for n in &names {
                let (_, warnings) = s
                    .merge_patch(&BACKUP, n, json!({"spec": {"deleteBackup": true}}))
                    .await?;
                print_warnings(&warnings);
                println!(
                    "Request to delete backup \"{n}\" and its data in object storage submitted successfully. The \
                     NonAdminBackup goes once Velero has deleted the data."
                );
            }
            Ok(())
        }
    }
}

async fn logs(s: &Session, kind: &str, name: &str, tls: &Tls) -> Result<()> {
    let mut out = std::io::stdout();
    download::copy(s, kind, name, tls, &mut out).await
}

async fn restore(s: &Session, verb: RestoreVerb) -> Result<()> {
    match verb {
        RestoreVerb::Create {
            name,
            from_backup,
            from_schedule,
            flags,
            meta,
            out,
        } => {
            let source = from_backup.as_deref().or(from_schedule.as_deref()).unwrap_or_default();
            let name = name.unwrap_or_else(|| {
                let ts = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
                format!("{source}-{ts}")
            });
            let mut spec = Map::new();
            // A schedule name is sent as Velero would send it, so nac's refusal says what to use instead.
            match (&from_backup, &from_schedule) {
                (Some(b), _) => spec.insert("backupName".into(), json!(b)),
                (None, Some(sc)) => spec.insert("scheduleName".into(), json!(sc)),
                (None, None) => None,
            };
            flags.add_to(&mut spec)?;
            create(s, &RESTORE, &name, json!({"restoreSpec": spec}), &meta, &out).await
        }
        RestoreVerb::Preview { backup, flags, timeout } => {
            let timeout = crate::duration::GoDuration::parse(&timeout)
                .map_err(|e| Error::User(format!("--timeout: {e}")))?
                .as_std();
            let mut spec = Map::new();
            spec.insert("backupName".into(), json!(backup));
            flags.add_to(&mut spec)?;
            preview(s, &backup, spec, timeout).await
        }
        RestoreVerb::Get(g) => get(s, &RESTORE, &g, |i| show::restores(i, &RESTORE)).await,
        RestoreVerb::Describe(args) => {
            let items = s.some_or_all(&RESTORE, &args.names, None).await?;
            describe(&items, args.output, |o| show::describe_restore(o, &RESTORE))
        }
        RestoreVerb::Logs { name, tls } => logs(s, "RestoreLog", &name, &tls).await,
        RestoreVerb::Delete { names } => delete_all(s, &RESTORE, &names, " The restored objects stay.").await,
    }
}

/// `restore preview`: a NonAdminRestore marked as a preview, followed until nac has judged it (or refused it),
/// its table printed, and the object deleted whatever happened.
async fn preview(s: &Session, backup: &str, spec: Map<String, Value>, timeout: std::time::Duration) -> Result<()> {
    let ts = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
    let name = format!("{}-preview-{ts}", backup.chars().take(40).collect::<String>());
    let mut o = object(&RESTORE, &name, json!({"restoreSpec": spec}));
    o["metadata"]["annotations"] = json!({ crate::rights::preview::PREVIEW_ANNOTATION: "true" });
    let (_, warnings) = s.create(&RESTORE, &o).await?;
    print_warnings(&warnings);
    let judged = tokio::time::timeout(timeout, async {
        loop {
            let o = s.get(&RESTORE, &name).await?;
            if show::preview_done(&o) {
                return Ok::<Value, Error>(o);
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    })
    .await;
    let deleted = s.delete(&RESTORE, &name).await;
    let o = match judged {
        Ok(o) => o?,
        Err(_) => {
            return Err(Error::Api(format!(
                "nac did not judge the preview {name} within {}s{}",
                timeout.as_secs(),
                if deleted.is_ok() { "; it was deleted" } else { "" }
            )))
        }
    };
    deleted?;
    if o["status"]["phase"] == "BackingOff" {
        return Err(Error::Api(format!("the restore would be refused{}", why(&o))));
    }
    print!("{}", show::preview_table(&o["status"]["preview"]));
    Ok(())
}

fn describe(items: &[Value], output: Output, text: impl Fn(&Value) -> String) -> Result<()> {
    if output != Output::Table {
        print!("{}", show::structured(items, output)?);
        return Ok(());
    }
    let texts: Vec<String> = items.iter().map(text).collect();
    print!("{}", texts.join("\n"));
    Ok(())
}

async fn bsl(s: &Session, verb: BslVerb) -> Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let secrets: kube::Api<Secret> = kube::Api::namespaced(s.client.clone(), &s.namespace);
    match verb {
        BslVerb::Create {
            name,
            provider,
            bucket,
            prefix,
            config,
            credential,
            credential_file,
            cacert,
            output,
        } => {
            let config_map = key_values("--config", &config)?;
            let (secret, key) = match (credential, &credential_file) {
                (Some(c), _) => {
                    let (n, k) = c
                        .split_once('=')
                        .ok_or_else(|| Error::User(format!("--credential {c:?}: expected SECRET=KEY")))?;
                    (n.to_string(), k.to_string())
                }
                (None, Some(_)) => (format!("{name}-credentials"), "cloud".to_string()),
                (None, None) => {
                    return Err(Error::User(
                        "the location needs credentials: --credential SECRET=KEY or --credential-file FILE".into(),
                    ))
                }
            };
            let mut storage = json!({"bucket": bucket});
            if let Some(p) = prefix {
                storage["prefix"] = json!(p);
            }
            if let Some(f) = cacert {
                use base64::Engine;
                let pem = std::fs::read(&f).map_err(|e| Error::User(format!("reading {}: {e}", f.display())))?;
                storage["caCert"] = json!(base64::engine::general_purpose::STANDARD.encode(pem));
            }
            if let Some(f) = &credential_file {
                let data = std::fs::read(f).map_err(|e| Error::User(format!("reading {}: {e}", f.display())))?;
                let secret_obj: Secret = serde_json::from_value(json!({
                    "metadata": {"name": secret, "labels": {MADE_FOR_LOCATION: name}},
                    "type": "Opaque",
                    "data": {key.clone(): k8s_openapi::ByteString(data)},
                }))
                .map_err(|e| Error::User(e.to_string()))?;
                secrets
                    .create(&Default::default(), &secret_obj)
                    .await
                    .map_err(|e| super::api_error(&format!("creating Secret {secret}"), e))?;
                eprintln!("Secret \"{secret}\" created with the credentials (key {key}).");
            }
            let spec = json!({"backupStorageLocationSpec": {
                "provider": provider, "objectStorage": storage, "config": config_map,
                "credential": {"name": secret, "key": key}}});
            let (made, warnings) = match s.create(&LOCATION, &object(&LOCATION, &name, spec)).await {
                Ok(m) => m,
                Err(e) => {
                    // Refused or failed: the Secret made for it goes again.
                    if credential_file.is_some() {
                        if let Err(d) = secrets.delete(&secret, &Default::default()).await {
                            eprintln!("Warning: the Secret {secret} made for the location was not deleted: {d}");
                        }
                    }
                    return Err(e);
                }
            };
            print_warnings(&warnings);
            match output {
                Output::Table => println!(
                    "Backup storage location \"{name}\" requested. If the cluster admin must approve it, it is \
                     usable once APPROVED is True: `kubectl nac bsl get {name}`; then back up to it with \
                     `kubectl nac backup create NAME --storage-location {name}`."
                ),
                o => print!("{}", show::structured(&[made], o)?),
            }
            Ok(())
        }
        BslVerb::Get(args) => get_in(s, &LOCATION, &args, |i| show::locations(i, &LOCATION)).await,
        BslVerb::Describe(args) => {
            let items = s.some_or_all(&LOCATION, &args.names, None).await?;
            describe(&items, args.output, |o| show::describe_location(o, &LOCATION))
        }
        BslVerb::Delete { names } => {
            for n in &names {
                s.delete(&LOCATION, n).await?;
                println!("Request to delete backup storage location \"{n}\" submitted successfully.");
                let made = match secrets
                    .list(&kube::api::ListParams::default().labels(&format!("{MADE_FOR_LOCATION}={n}")))
                    .await
                {
                    Ok(l) => l.items,
                    Err(e) => {
                        eprintln!(
                            "Warning: a credentials Secret the plugin made for {n} may be left: listing Secrets: {e}"
                        );
                        Vec::new()
                    }
                };
                for secret in made {
                    let sn = secret.metadata.name.unwrap_or_default();
                    secrets
                        .delete(&sn, &Default::default())
                        .await
                        .map_err(|e| super::api_error(&format!("deleting Secret {sn}"), e))?;
                    println!("Secret \"{sn}\" the plugin made for it deleted.");
                }
            }
            Ok(())
        }
    }
}

async fn schedule(s: &Session, verb: ScheduleVerb) -> Result<()> {
    match verb {
        ScheduleVerb::Create {
            name,
            schedule,
            paused,
            skip_immediately,
            flags,
            meta,
            output,
        } => {
            let mut spec = json!({"schedule": schedule, "paused": paused, "template": {"backupSpec": flags.spec()?}});
            if let Some(skip) = skip_immediately {
                spec["skipImmediately"] = json!(skip);
            }
            let mut o = object(&SCHEDULE, &name, spec);
            meta.add_to(&mut o)?;
            let (made, warnings) = s.create(&SCHEDULE, &o).await?;
            print_warnings(&warnings);
            match output {
                Output::Table => println!(
                    "Schedule \"{name}\" created successfully. Its backups appear as NonAdminBackups \
                     {name}-<timestamp>: `kubectl nac backup get`."
                ),
                o => print!("{}", show::structured(&[made], o)?),
            }
            Ok(())
        }
        ScheduleVerb::Get(args) => get_in(s, &SCHEDULE, &args, show::schedules).await,
        ScheduleVerb::Describe(args) => {
            let items = s.some_or_all(&SCHEDULE, &args.names, None).await?;
            describe(&items, args.output, show::describe_schedule)
        }
        ScheduleVerb::Pause { names } => {
            for n in &names {
                let (_, warnings) = s.merge_patch(&SCHEDULE, n, json!({"spec": {"paused": true}})).await?;
                print_warnings(&warnings);
                println!("Schedule \"{n}\" paused successfully.");
            }
            Ok(())
        }
        ScheduleVerb::Unpause {
            names,
            skip_immediately,
        } => {
            for n in &names {
                let mut spec = json!({"paused": false});
                if let Some(skip) = skip_immediately {
                    spec["skipImmediately"] = json!(skip);
                }
                let (_, warnings) = s.merge_patch(&SCHEDULE, n, json!({ "spec": spec })).await?;
                print_warnings(&warnings);
                println!("Schedule \"{n}\" unpaused successfully.");
            }
            Ok(())
        }
        ScheduleVerb::Delete { names } => delete_all(s, &SCHEDULE, &names, " Its backups stay.").await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_parse_into_label_selectors() {
        assert_eq!(
            parse_selector("app=web, tier!=db,debug,!skip,env==prod").unwrap(),
            json!({"matchLabels": {"app": "web", "env": "prod"}, "matchExpressions": [
                {"key": "tier", "operator": "NotIn", "values": ["db"]},
                {"key": "debug", "operator": "Exists"},
                {"key": "skip", "operator": "DoesNotExist"}]})
        );
        for bad in ["a b=c", "=x", "a=b c", "!"] {
            assert!(parse_selector(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn flags_become_a_backup_spec() {
        let cli = Cli::try_parse_from([
            "kubectl-nac",
            "backup",
            "create",
            "b",
            "--include-resources",
            "configmaps,secrets",
            "--ttl",
            "24h",
            "--snapshot-volumes=false",
            "--default-volumes-to-fs-backup",
            "-l",
            "app=web",
        ])
        .unwrap();
        let Command::Backup {
            verb: BackupVerb::Create { flags, .. },
        } = cli.command
        else {
            panic!("not a backup create");
        };
        assert_eq!(
            flags.spec().unwrap(),
            json!({"includedResources": ["configmaps", "secrets"], "ttl": "24h", "snapshotVolumes": false,
                   "defaultVolumesToFsBackup": true, "labelSelector": {"matchLabels": {"app": "web"}}})
        );
    }

    fn backup_create(args: &[&str]) -> (Option<String>, BackupFlags, Option<String>, ObjectMeta) {
        let cli = Cli::try_parse_from(["kubectl-nac", "backup", "create"].iter().chain(args)).unwrap();
        let Command::Backup {
            verb:
                BackupVerb::Create {
                    name,
                    flags,
                    from_schedule,
                    meta,
                    ..
                },
        } = cli.command
        else {
            panic!("not a backup create");
        };
        (name, flags, from_schedule, meta)
    }

    #[test]
    fn velero_s_create_flags_become_the_backup_spec() {
        let (name, flags, _, meta) = backup_create(&[
            "b",
            "--or-selector",
            "app=web or tier=db,env=prod",
            "--include-namespace-scoped-resources",
            "configmaps,deployments.apps",
            "--exclude-cluster-scoped-resources",
            "storageclasses.storage.k8s.io",
            "--ordered-resources",
            "pods=ns/db-0,ns/db-1; persistentvolumeclaims=ns/data",
            "--csi-snapshot-timeout",
            "20m",
            "--item-operation-timeout",
            "2h",
            "--snapshot-move-data",
            "--data-mover",
            "velero",
            "--labels",
            "team=shop,tier=gold",
            "--annotations",
            "note=before upgrade",
        ]);
        assert_eq!(name.as_deref(), Some("b"));
        assert_eq!(
            flags.spec().unwrap(),
            json!({"orLabelSelectors": [{"matchLabels": {"app": "web"}}, {"matchLabels": {"tier": "db", "env": "prod"}}],
                   "includedNamespaceScopedResources": ["configmaps", "deployments.apps"],
                   "excludedClusterScopedResources": ["storageclasses.storage.k8s.io"],
                   "orderedResources": {"pods": "ns/db-0,ns/db-1", "persistentvolumeclaims": "ns/data"},
                   "csiSnapshotTimeout": "20m", "itemOperationTimeout": "2h", "snapshotMoveData": true,
                   "datamover": "velero"})
        );
        let mut o = json!({"metadata": {"name": "b"}});
        meta.add_to(&mut o).unwrap();
        assert_eq!(
            o["metadata"],
            json!({"name": "b", "labels": {"team": "shop", "tier": "gold"}, "annotations": {"note": "before upgrade"}})
        );
    }

    #[test]
    fn what_nac_forbids_is_sent_for_nac_to_refuse_and_mixed_filters_are_refused_here() {
        let (_, flags, _, _) = backup_create(&[
            "b",
            "--include-namespaces",
            "other",
            "--include-cluster-resources",
            "--volume-snapshot-locations",
            "vsl",
        ]);
        assert_eq!(
            flags.spec().unwrap(),
            json!({"includedNamespaces": ["other"], "includeClusterResources": true, "volumeSnapshotLocations": ["vsl"]})
        );
        let (_, flags, _, _) = backup_create(&[
            "b",
            "--include-resources",
            "pods",
            "--include-namespace-scoped-resources",
            "pods",
        ]);
        assert!(flags.spec().is_err());
        let (_, flags, _, _) = backup_create(&["b", "--ordered-resources", "pods"]);
        assert!(flags.spec().is_err());
        assert!(Cli::try_parse_from([
            "kubectl-nac",
            "backup",
            "create",
            "b",
            "-l",
            "a=b",
            "--or-selector",
            "c=d"
        ])
        .is_err());
    }

    #[test]
    fn a_backup_from_a_schedule_needs_no_name_and_no_other_spec_flags() {
        let (name, flags, from, _) = backup_create(&["--from-schedule", "nightly"]);
        assert_eq!((name, from.as_deref()), (None, Some("nightly")));
        assert!(!flags.shapes_spec());
        let (_, flags, _, _) = backup_create(&["--from-schedule", "nightly", "--ttl", "1h"]);
        assert!(flags.shapes_spec());
        assert!(Cli::try_parse_from(["kubectl-nac", "backup", "create"]).is_err());
    }

    #[test]
    fn restore_flags_parse() {
        let cli = Cli::try_parse_from([
            "kubectl-nac",
            "restore",
            "create",
            "--from-backup",
            "b",
            "--restore-volumes=false",
            "--existing-resource-policy",
            "update",
            "--namespace-mappings",
            "a:b",
            "--labels",
            "x=y",
        ])
        .unwrap();
        let Command::Restore {
            verb:
                RestoreVerb::Create {
                    from_backup,
                    flags,
                    meta,
                    ..
                },
        } = cli.command
        else {
            panic!("not a restore create");
        };
        assert_eq!(from_backup.as_deref(), Some("b"));
        assert_eq!(flags.restore_volumes, Some(false));
        assert_eq!(flags.existing_resource_policy.as_deref(), Some("update"));
        assert_eq!(flags.namespace_mappings, vec!["a:b"]);
        assert_eq!(meta.labels, vec!["x=y"]);
        let mut spec = Map::new();
        flags.add_to(&mut spec).unwrap();
        assert_eq!(
            Value::Object(spec),
            json!({"restorePVs": false, "existingResourcePolicy": "update", "namespaceMapping": {"a": "b"}})
        );
        let preview = Cli::try_parse_from([
            "kubectl-nac",
            "restore",
            "preview",
            "nightly",
            "--existing-resource-policy=update",
            "--include-resources",
            "configmaps",
        ])
        .unwrap();
        let Command::Restore {
            verb: RestoreVerb::Preview { backup, flags, timeout },
        } = preview.command
        else {
            panic!("not a restore preview");
        };
        assert_eq!((backup.as_str(), timeout.as_str()), ("nightly", "5m"));
        let mut spec = Map::new();
        flags.add_to(&mut spec).unwrap();
        assert_eq!(spec["existingResourcePolicy"], "update");
        assert_eq!(spec["includedResources"], json!(["configmaps"]));
        assert!(Cli::try_parse_from(["kubectl-nac", "restore", "preview"]).is_err());
        assert!(Cli::try_parse_from(["kubectl-nac", "restore", "create"]).is_err());
        assert!(Cli::try_parse_from([
            "kubectl-nac",
            "restore",
            "create",
            "--from-backup",
            "b",
            "--from-schedule",
            "s"
        ])
        .is_err());
    }

    #[test]
    fn help_reads_like_velero() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
        let help = Cli::command().render_long_help().to_string();
        for verb in ["backup", "restore", "schedule", "completion"] {
            assert!(help.contains(verb), "{help}");
        }
    }
}
