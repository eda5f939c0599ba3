//! The command line: `kubectl nac backup|restore|schedule <verb>`, and what each verb does.

use super::download::{self, Tls};
use super::kinds::{Kind, BACKUP, LOCATION, RESTORE, SCHEDULE};
use super::show::{self, Output};
use super::{manifest, object, print_warnings, wait, Error, Result, Session};
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
                  admin's policy decides what they may do."
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
    /// Print a shell completion script (bash, zsh, fish, powershell, elvish)
    Completion { shell: clap_complete::Shell },
}

/// What a backup or restore selects (velero's resource filters and label selector).
#[derive(Args, Debug, Default, Clone)]
struct Filters {
    /// Resources to include (comma-separated; default: all)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    include_resources: Vec<String>,
    /// Resources to exclude (comma-separated)
    #[arg(long, value_delimiter = ',', value_name = "RESOURCES")]
    exclude_resources: Vec<String>,
    /// Only objects matching this label selector (k=v, k!=v, k, !k, comma-separated)
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
}

impl Filters {
    /// Adds the filters to a Velero BackupSpec or RestoreSpec.
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
        Ok(())
    }
}

/// The settings of a backup (`velero backup create`'s).
#[derive(Args, Debug, Default, Clone)]
struct BackupFlags {
    #[command(flatten)]
    filters: Filters,
    /// How long the backup is kept (Go duration, e.g. 720h0m0s); the cluster policy may set or bound it
    #[arg(long)]
    ttl: Option<String>,
    /// Your NonAdminBackupStorageLocation, or a location the admin opened (default: the cluster's default)
    #[arg(long, value_name = "NAME")]
    storage_location: Option<String>,
    /// Take snapshots of persistent volumes
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    snapshot_volumes: Option<bool>,
    /// Back up all pod volumes with the file system backup
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    default_volumes_to_fs_backup: Option<bool>,
}

impl BackupFlags {
    fn spec(&self) -> Result<Value> {
        let mut spec = Map::new();
        self.filters.add_to(&mut spec)?;
        for (key, v) in [("ttl", &self.ttl), ("storageLocation", &self.storage_location)] {
            if let Some(v) = v {
                spec.insert(key.into(), json!(v));
            }
        }
        for (key, v) in [
            ("snapshotVolumes", self.snapshot_volumes),
            ("defaultVolumesToFsBackup", self.default_volumes_to_fs_backup),
        ] {
            if let Some(v) = v {
                spec.insert(key.into(), json!(v));
            }
        }
        Ok(Value::Object(spec))
    }
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
        name: String,
        #[command(flatten)]
        flags: BackupFlags,
        #[command(flatten)]
        out: CreateOut,
    },
    /// List backups
    Get(GetArgs),
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

#[derive(Subcommand, Debug)]
enum RestoreVerb {
    /// Restore from a backup of this namespace
    Create {
        /// Name (default: <backup>-<timestamp>)
        name: Option<String>,
        /// The NonAdminBackup to restore from
        #[arg(long, value_name = "BACKUP")]
        from_backup: String,
        #[command(flatten)]
        filters: Filters,
        #[command(flatten)]
        out: CreateOut,
    },
    /// List restores
    Get(GetArgs),
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
        /// Skip the run that would be due at once
        #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
        skip_immediately: Option<bool>,
        #[command(flatten)]
        flags: BackupFlags,
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
        Command::Completion { .. } => Ok(()),
    }
}

/// Creates an object and says so as Velero does, then waits when asked.
async fn create(s: &Session, kind: &Kind, name: &str, spec: Value, out: &CreateOut) -> Result<()> {
    let (made, warnings) = s.create(kind, &object(kind, name, spec)).await?;
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

async fn get(s: &Session, kind: &Kind, args: &GetArgs, table: fn(&[Value]) -> String) -> Result<()> {
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
        BackupVerb::Create { name, flags, out } => {
            let spec = flags.spec()?;
            // A backup still running over the same items is worth knowing of before a second one queues.
            match manifest::overlaps(s, &spec).await {
                Ok(w) => print_warnings(&w),
                Err(e) => eprintln!("Warning: the overlap with running backups could not be checked: {e}"),
            }
            create(s, &BACKUP, &name, json!({ "backupSpec": spec }), &out).await
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
        BackupVerb::Get(args) => get(s, &BACKUP, &args, |i| show::backups(i, &BACKUP)).await,
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
            filters,
            out,
        } => {
            let name = name.unwrap_or_else(|| {
                let ts = jiff::Timestamp::now().strftime("%Y%m%d%H%M%S").to_string();
                format!("{from_backup}-{ts}")
            });
            let mut spec = Map::new();
            spec.insert("backupName".into(), json!(from_backup));
            filters.add_to(&mut spec)?;
            create(s, &RESTORE, &name, json!({"restoreSpec": spec}), &out).await
        }
        RestoreVerb::Get(args) => get(s, &RESTORE, &args, |i| show::restores(i, &RESTORE)).await,
        RestoreVerb::Describe(args) => {
            let items = s.some_or_all(&RESTORE, &args.names, None).await?;
            describe(&items, args.output, |o| show::describe_restore(o, &RESTORE))
        }
        RestoreVerb::Logs { name, tls } => logs(s, "RestoreLog", &name, &tls).await,
        RestoreVerb::Delete { names } => delete_all(s, &RESTORE, &names, " The restored objects stay.").await,
    }
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
            let mut config_map = Map::new();
            for kv in config.iter().filter(|c| !c.is_empty()) {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| Error::User(format!("--config {kv:?}: expected key=value")))?;
                config_map.insert(k.trim().into(), json!(v.trim()));
            }
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
        BslVerb::Get(args) => get(s, &LOCATION, &args, |i| show::locations(i, &LOCATION)).await,
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
            output,
        } => {
            let mut spec = json!({"schedule": schedule, "paused": paused, "template": {"backupSpec": flags.spec()?}});
            if let Some(skip) = skip_immediately {
                spec["skipImmediately"] = json!(skip);
            }
            let (made, warnings) = s.create(&SCHEDULE, &object(&SCHEDULE, &name, spec)).await?;
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
        ScheduleVerb::Get(args) => get(s, &SCHEDULE, &args, show::schedules).await,
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
