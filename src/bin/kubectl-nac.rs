//! `kubectl-nac`: the kubectl plugin for namespace users (`kubectl nac backup create ...`); see `nac::plugin`.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = nac::plugin::Cli::parse();
    std::process::exit(nac::plugin::run(cli).await);
}
