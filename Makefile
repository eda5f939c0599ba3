# nac: build, test, run. `make run` and `make test` are the two commands a new machine needs.
include make/cluster.mk
include make/velero.mk

CARGO ?= cargo

.PHONY: image image-rootfs node-up e2e-node build release install-plugin test unit lint docs-check e2e e2e-velero e2e-faults run-signals-check run bench scale velero-bench admission-bench chart-test chart-lint clean

build:
	$(CARGO) build --bins

release:
	$(CARGO) build --release --bins

# nac's container image, built offline from the release build as an OCI archive (no registry, no daemon):
# target/image/nac-<version>.tar, named localhost/nac:<version> (the chart's default). Reproducible: the same
# commit gives the same digest. Push it with `skopeo copy oci-archive:target/image/nac-<version>.tar
# docker://REGISTRY/nac:<version>`; load it with `ctr images import` / `podman load` / `docker load`.
image:
	$(CARGO) build --release --bin nac
	hack/images.sh nac

# The same image's root filesystem in target/image/rootfs: the build context of the Containerfile, for admins
# who build with their own tooling (`podman build -f Containerfile target/image/rootfs`).
image-rootfs:
	$(CARGO) build --release --bin nac
	hack/images.sh rootfs

# The local environment with a real node (root only): containerd, kubelet, kube-proxy, kube-scheduler, pod
# networking, CSI volumes and snapshots (the project's host-path driver), Velero and its node agent in pods. `make cluster-down` stops it and restores the machine.
node-up:
	NODE=1 $(MAKE) --no-print-directory cluster-up

# End-to-end tests that need the node: nac installed by Helm from its image, file-system backup of volume data,
# leader failover, helm upgrade and uninstall (tests/e2e_node.rs), against `make node-up` in $(CLUSTER_DIR).
e2e-node: image
	$(CARGO) test --features e2e,node --test e2e_node -- --test-threads=1

# The kubectl plugin for namespace users (`kubectl nac ...`), installed into cargo's bin directory (on PATH).
install-plugin:
	$(CARGO) install --locked --path . --bin kubectl-nac

# Everything CI runs: formatting, clippy, unit and handler tests, the end-to-end suites against local
# environments this target starts and always stops again, the chart, the documentation, and as root the node
# suite (left out with a notice otherwise; TEST_NODE=1 requires it, as CI does). How long each phase took at the
# end (hack/test.sh).
test:
	hack/test.sh

unit:
	$(CARGO) test

# Links between Markdown files, and the command blocks of README.md and docs/{user,admin}-guide.md run against a
# `make run` environment of its own (.cluster-docs, started and stopped here).
docs-check:
	hack/docs-check.sh

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --features e2e,node -- -D warnings
	hack/import-cycles.py src
	hack/benchmarks-size.sh

# End-to-end tests that play Velero (and the webhook/policy ones), against a cluster started with
# `VELERO_MODE=fake make cluster-up` in $(CLUSTER_DIR).
E2E_FAKE_TESTS := --test e2e_webhooks --test e2e_policy --test e2e_controller --test e2e_ha --test e2e_restart
e2e:
	$(CARGO) build --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/debug/nac"
	$(CARGO) test --features e2e $(E2E_FAKE_TESTS)

# End-to-end tests with the real Velero and S3 server, against the `make cluster-up` environment in $(CLUSTER_DIR).
e2e-velero:
	$(CARGO) build --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/debug/nac"
	$(CARGO) test --features e2e --test e2e_velero --test e2e_velero_restarts --test e2e_plugin --test e2e_attempts \
		--test e2e_rights_locations

# Fault injection with the real parts (Velero or the S3 server killed mid-backup, the API server restarted under
# webhook traffic, nac's leader killed mid-delete), against the `make cluster-up` environment in $(CLUSTER_DIR);
# prints one `fault:` line per fault (BENCHMARKS.md). `make test` runs it with the other real-Velero tests.
e2e-faults:
	$(CARGO) build --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/debug/nac"
	$(CARGO) test --features e2e --test e2e_faults -- --nocapture

# `make run` stopped by Ctrl-C, SIGTERM and SIGHUP (to its process group and to make alone) leaves nothing
# running; its own environments (.cluster-signals), one after the other.
run-signals-check:
	hack/run-signals-check.sh

# The local environment (control plane, real Velero and S3 server) plus nac with the strict example policy and a
# demo tenant, in the foreground until Ctrl-C, with a printed walkthrough.
run:
	RUN_PARENT_PID=$$PPID hack/run.sh

bench:
	$(CARGO) bench --bench policy

clean: cluster-clean
	$(CARGO) clean

# Reconciler scale run against a VELERO_MODE=fake cluster in $(CLUSTER_DIR): 1,000 NABs over 100 namespaces
# (see BENCHMARKS.md).
scale:
	$(CARGO) build --release --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/release/nac"
	$(CARGO) test --release --features e2e,scale --test scale_run -- --nocapture

# Backup latency with the real Velero (one backup, then 50 at once over 10 namespaces) against the `make
# cluster-up` environment in $(CLUSTER_DIR) (see BENCHMARKS.md).
velero-bench:
	$(CARGO) build --release --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/release/nac"
	$(CARGO) test --release --features e2e,scale --test velero_bench -- --nocapture

# Admission through the API server: no admission, nac's webhooks, nac's mutating webhook only, CEL policies,
# interleaved, on a control plane of its own in .cluster-admission, started and stopped here (see BENCHMARKS.md).
admission-bench:
	hack/admission-bench.sh

# Helm chart: lint/template per certificate mode, server-side validation, install/upgrade/uninstall on its own
# local control plane (.cluster-chart, started and stopped here).
chart-test: helm
	hack/chart-test.sh

chart-lint: helm
	hack/chart-test.sh --static
