//! `kubectl-nac`: the kubectl plugin for namespace users (`kubectl nac backup create ...`); see `nac::plugin`.
#![warn(clippy::too_many_lines)]

use clap::Parser;

#[tokio::main]
async fn main() {
    // Output piped into `head` ends quietly, as other command-line tools do, instead of a panic on the broken
    // pipe.
    #[cfg(unix)]
    // SAFETY: restoring the default disposition of one signal, before any other thread writes output.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = nac::plugin::Cli::parse();
    std::process::exit(nac::plugin::run(cli).await);
}
