# nac: build, test, run. `make run` and `make test` are the two commands a new machine needs.
include make/cluster.mk

CARGO ?= cargo

.PHONY: build release test unit lint e2e run bench scale chart-test chart-lint clean

build:
	$(CARGO) build --bins

release:
	$(CARGO) build --release --bins

# Everything CI runs: formatting, clippy, unit and handler tests, and the end-to-end suite against a local
# control plane that this target starts (in .cluster-test) and always stops again.
test:
	hack/test.sh

unit:
	$(CARGO) test

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --features e2e -- -D warnings

# The end-to-end suite alone, against the cluster in $(CLUSTER_DIR) (make cluster-up first).
e2e:
	$(CARGO) build --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/debug/nac"
	$(CARGO) test --features e2e --test 'e2e_*'

# A local control plane plus nac with the strict example policy, in the foreground until Ctrl-C.
run:
	hack/run.sh

bench:
	$(CARGO) bench --bench policy

clean: cluster-clean
	$(CARGO) clean

# Reconciler scale run against the cluster in $(CLUSTER_DIR): 1,000 NABs over 100 namespaces (see BENCHMARKS.md).
scale:
	$(CARGO) build --release --bins
	hack/install-crds.sh "$${CARGO_TARGET_DIR:-target}/release/nac"
	$(CARGO) test --release --features e2e,scale --test scale_run -- --nocapture

# Helm chart: lint/template per certificate mode, server-side validation, install/upgrade/uninstall on its own
# local control plane (.cluster-chart, started and stopped here).
chart-test: helm
	hack/chart-test.sh

chart-lint: helm
	hack/chart-test.sh --static
