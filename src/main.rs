//! The `nac` command: `serve`, `crds`, `policy check`, `policy from-dpa`, `certs`, `webhook-config`.
#![warn(clippy::too_many_lines)]

// Development tools of the CLI (`nac certs`, `nac webhook-config`), kept out of the library.
#[path = "devtools/dev_ca.rs"]
mod dev_ca;
#[path = "devtools/webhook_config.rs"]
mod webhook_config;

use anyhow::Context;
use clap::{Parser, Subcommand};
use nac::config::{LogFormat, Settings};
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(feature = "heap-profile")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

#[derive(Parser)]
#[command(name = "nac", version, about = "Non-admin backup and restore for Velero")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the admission webhooks (and run the controllers unless disabled).
    Serve {
        /// Settings file (YAML); NAC_* environment variables override it.
        #[arg(long, env = "NAC_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Print the CustomResourceDefinitions of nac's resources as YAML.
    Crds,
    /// Work with admin policies.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Write a development CA and a webhook serving certificate.
    Certs {
        /// Service name the API server calls nac by.
        #[arg(long, default_value = "nac")]
        service: String,
        /// Namespace of the service.
        #[arg(long, default_value = "nac-system")]
        namespace: String,
        /// Extra DNS names or IP addresses for the certificate.
        #[arg(long = "host")]
        hosts: Vec<String>,
        /// Validity in days.
        #[arg(long, default_value_t = 365)]
        days: u32,
        /// Output directory (ca.crt, ca.key, tls.crt, tls.key).
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Print Mutating/ValidatingWebhookConfigurations that call nac at a URL (local runs and tests).
    WebhookConfig {
        /// Base URL of nac's webhook listener, e.g. https://127.0.0.1:9443
        #[arg(long)]
        url: String,
        /// PEM CA bundle that signed nac's serving certificate.
        #[arg(long)]
        ca_file: PathBuf,
        /// nac's namespace (its policy ConfigMap lives there).
        #[arg(long, default_value = "nac-system")]
        namespace: String,
        /// Velero's namespace (the guard on Velero's own Backups and PodVolumeBackups watches it).
        #[arg(long, default_value = "openshift-adp")]
        velero_namespace: String,
        #[arg(long, default_value_t = 5)]
        timeout_seconds: u32,
        /// nac's ServiceAccount (in --namespace): the tenant webhooks and the guard leave out requests nac makes
        /// as it (matchConditions on the request's user), as the Helm chart registers them.
        #[arg(long)]
        service_account: Option<String>,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Validate a policy file (a policy document or a ConfigMap holding one) and summarise it.
    Check { file: PathBuf },
    /// Print nac's policy ConfigMap made from an OADP DataProtectionApplication's non-admin settings
    /// (spec.nonAdmin), for moving from OADP's non-admin controller to nac.
    FromDpa {
        /// The DataProtectionApplication manifest (YAML or JSON; `kubectl get dpa NAME -o yaml`).
        file: PathBuf,
        /// Name of the ConfigMap.
        #[arg(long, default_value = "nac-policy")]
        name: String,
        /// nac's namespace (where its policy ConfigMap lives).
        #[arg(long, default_value = "nac-system")]
        namespace: String,
        /// Print only the policy document (the ConfigMap's policy.yaml), the notes on standard error.
        #[arg(long)]
        document: bool,
    },
    /// Print a policy file's document (a policy document or a ConfigMap holding one) with hosts added to
    /// nonAdminBSL.allowedEndpoints.hosts (`make run` allows its local S3 server so).
    AllowEndpoints {
        file: PathBuf,
        /// A host tenants' storage locations may name (repeatable).
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
    },
}

/// glibc's malloc tuned for a long-lived process whose memory is its caches (BENCHMARKS.md §4), each setting
/// unless the admin set it through glibc's own variable:
/// - one arena (`MALLOC_ARENA_MAX`), not one per busy thread: each arena keeps what is freed into it for its own
///   later use, and at 10,000 NonAdminBackups the runtime's two threads' arenas held 36 MiB each;
/// - a fixed mmap threshold of 128 KiB (`MALLOC_MMAP_THRESHOLD_`): glibc raises its threshold after each large
///   block freed, up to 32 MiB, so a list's large buffers land in an arena and their pages stay resident after.
fn tune_malloc() {
    #[cfg(all(target_env = "gnu", not(feature = "heap-profile")))]
    for (variable, parameter, value) in [
        ("MALLOC_ARENA_MAX", libc::M_ARENA_MAX, 1),
        ("MALLOC_MMAP_THRESHOLD_", libc::M_MMAP_THRESHOLD, 128 * 1024),
    ] {
        if std::env::var_os(variable).is_none() {
            // SAFETY: mallopt only sets a malloc parameter; called before the runtime's threads start.
            unsafe { libc::mallopt(parameter, value) };
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Serve { config } => {
            tune_malloc();
            // Written when serve returns (SIGTERM included), at the profiler's drop.
            #[cfg(feature = "heap-profile")]
            let _profiler = dhat::Profiler::builder()
                .file_name(
                    std::env::var("NAC_HEAP_PROFILE")
                        .unwrap_or_else(|_| "nac-heap-{pid}.json".into())
                        .replace("{pid}", &std::process::id().to_string()),
                )
                // Deep enough to reach the store or watch an allocation is made for (the default, 10, is not).
                .trim_backtraces(Some(40))
                .build();
            let settings = Settings::load(config.as_deref())?;
            init_tracing(&settings)?;
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
            rt.block_on(nac::runtime::run(settings))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Crds => {
            print!("{}", nac::api::crds_yaml());
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy {
            command: PolicyCommand::Check { file },
        } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let doc = nac::policy::policy_text_of(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            match nac::policy::Policy::parse(&doc) {
                Ok(p) => {
                    println!("{}: valid policy", file.display());
                    for line in p.summary() {
                        println!("  {line}");
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("{}: {e}", file.display());
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Policy {
            command:
                PolicyCommand::FromDpa {
                    file,
                    name,
                    namespace,
                    document,
                },
        } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let t = nac::policy::from_dpa(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            if document {
                for n in &t.notes {
                    eprintln!("note: {n}");
                }
                print!("{}", t.policy_yaml());
            } else {
                print!("{}", t.configmap_yaml(&name, &namespace));
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Policy {
            command: PolicyCommand::AllowEndpoints { file, hosts },
        } => {
            let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
            let doc = nac::policy::policy_text_of(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let out = nac::policy::with_allowed_hosts(&doc, &hosts)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            print!("{out}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Certs {
            service,
            namespace,
            mut hosts,
            days,
            out,
        } => {
            let mut all = vec![
                format!("{service}.{namespace}.svc"),
                format!("{service}.{namespace}.svc.cluster.local"),
                format!("{service}.{namespace}"),
                service.clone(),
            ];
            all.append(&mut hosts);
            let ca = dev_ca::DevCa::new(days)?;
            let (cert, key) = ca.issue(&all, days)?;
            std::fs::create_dir_all(&out)?;
            for (name, body) in [
                ("ca.crt", &ca.cert_pem),
                ("ca.key", &ca.key_pem()),
                ("tls.crt", &cert),
                ("tls.key", &key),
            ] {
                let p = out.join(name);
                std::fs::write(&p, body).with_context(|| format!("writing {}", p.display()))?;
            }
            println!(
                "wrote ca.crt, ca.key, tls.crt, tls.key to {} for {}",
                out.display(),
                all.join(", ")
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::WebhookConfig {
            url,
            ca_file,
            namespace,
            velero_namespace,
            timeout_seconds,
            service_account,
        } => {
            let ca = std::fs::read(&ca_file).with_context(|| format!("reading {}", ca_file.display()))?;
            let own = service_account.map(|sa| webhook_config::service_account_user(&namespace, &sa));
            print!(
                "{}",
                webhook_config::render(
                    &url,
                    &ca,
                    &namespace,
                    &velero_namespace,
                    timeout_seconds,
                    own.as_deref()
                )
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn init_tracing(s: &Settings) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&s.log.level)
        .map_err(|e| anyhow::anyhow!("invalid settings: log.level {:?}: {e}", s.log.level))?;
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match s.log.format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
    Ok(())
}
