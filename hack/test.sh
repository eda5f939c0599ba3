#!/usr/bin/env bash
# The whole test suite, as CI runs it (`make test`). What it does, in order of need, and what runs side by side:
#
#   lint     cargo fmt, the links between documents, import cycles; clippy (-D warnings) lints nac as the debug
#            build below compiles it (clippy-driver as the workspace's compiler: one compilation serves both).
#   builds   nac once in debug, every target, features e2e,node (every test binary below, run directly: no
#            `cargo test` holds the build directory while the suites run); the Go binaries of the local
#            environment beside it (hack/go-tools.sh, one `go build` per module), the control plane's first;
#            nac's release build and image (the node suite's) and the Go binaries needed later in the
#            background at the lowest priority from the start, taking what CPU the rest leaves idle.
#   suites   unit and handler tests; then three lanes side by side, each with its own environments (most of the
#            suites' time is waiting: for Velero, which works through one backup at a time, for restarts):
#              $CLUSTER_DIR (.cluster-test, VELERO_MODE=fake): tests that play Velero, and the webhook and policy
#                tests; a small scale run asserting the API budget per NonAdminBackup (.cluster-scale, its own
#                control plane); then the Helm chart (hack/chart-test.sh, its own control plane .cluster-chart) and the
#                end-to-end suite against what the chart installs ($E2E_CHART_CLUSTER_DIR, .cluster-e2e-chart);
#                then the documentation's command blocks against a `make run` environment (.cluster-docs);
#              $VELERO_CLUSTER_DIR (.cluster-velero, VELERO_MODE=real: the real Velero and S3 server; tenants' own
#                locations within their rights, tests/e2e_rights_locations.rs), then
#                `make run` stopped by signals (.cluster-signals, four in turn);
#              $FAULTS_CLUSTER_DIR (.cluster-velero-faults, real): the suites that stop Velero and kill its parts
#                (tests/e2e_velero_restarts.rs, tests/e2e_faults.rs), and users' attempts to have Velero act beyond
#                their rights (tests/e2e_attempts.rs, which stops Velero to swap a tarball under it);
#            then, as root, the node suite: $NODE_CLUSTER_DIR (.cluster-node, NODE=1: a real node, nac's image
#            installed by Helm, Velero and its node agent in pods; tests/e2e_node.rs).
#
# The node suite needs root. TEST_NODE=1 requires it (`.ci/run` sets it: without root the run fails), TEST_NODE=0
# leaves it out; by default it runs as root and is otherwise left out with a notice, and the run passes.
# An environment already running in one of these directories is used and left running; every one started here is
# stopped on exit, also on failure or Ctrl-C. At the end: how long each phase took, and one line of test counts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

export CLUSTER_DIR=${TEST_CLUSTER_DIR:-$ROOT/.cluster-test}
export VELERO_CLUSTER_DIR=${TEST_VELERO_CLUSTER_DIR:-$ROOT/.cluster-velero}
FAULTS_CLUSTER_DIR=${TEST_FAULTS_CLUSTER_DIR:-$ROOT/.cluster-velero-faults}
E2E_CHART_CLUSTER_DIR=${TEST_E2E_CHART_CLUSTER_DIR:-$ROOT/.cluster-e2e-chart}
NODE_CLUSTER_DIR=${TEST_NODE_CLUSTER_DIR:-$ROOT/.cluster-node}
SCALE_CLUSTER_DIR=${TEST_SCALE_CLUSTER_DIR:-$ROOT/.cluster-scale}
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
FEATURES=e2e,node
# Scripts that would build nac (make run, the chart test) use the build made here.
export SKIP_BUILD=1

case ${TEST_NODE:-auto} in
1) node_suite=true ;;
0) node_suite=false ;;
auto) if ((EUID == 0)); then node_suite=true; else node_suite=false; fi ;;
*) echo "test: TEST_NODE must be 1, 0 or unset, not '$TEST_NODE'" >&2 && exit 2 ;;
esac
node_missing=false
if $node_suite && ((EUID != 0)); then
	echo "test: TEST_NODE=1 but not root: the node suite cannot run, and the run will fail at the end" >&2
	node_suite=false node_missing=true
fi

# Disk: a cold run writes about 20 GiB (nac's debug and release builds, Go's build cache, the environments) and
# the node suite about 4 GiB more at its peak. Short of that, tests fail late for reasons that do not name the disk
# (a kubelet evicting pods, an S3 server refusing writes): said at the start.
free_gib=$(($(df -Pk "$ROOT" | awk 'NR == 2 {print $4}') / 1048576))
need_gib=2
[[ -d $TARGET/debug ]] || need_gib=20
if $node_suite; then need_gib=$((need_gib + 4)); fi
if ((free_gib < need_gib)); then
	echo "test: WARNING: $free_gib GiB free on the file system of $ROOT; this run needs about $need_gib GiB" >&2
fi

exec 3>&1 # progress lines of the background jobs, whose output goes to their logs
RUN=$(mktemp -d "${TMPDIR:-/tmp}/nac-test.XXXXXX") # job logs, timings, test binaries, environments started
# Velero restarted by a test binary's queue watch (tests/common/velero.rs, velero#10519): a line each. A few are
# Velero's race on a busy machine; more would hide a stall nac caused, so the run fails over MAX_VELERO_RESTARTS.
export VELERO_RESTARTS_LOG=$RUN/velero-restarts
MAX_VELERO_RESTARTS=3
T0=$(date +%s)
: >"$RUN/timings" >"$RUN/started"
declare -A job_pid=()
current='' current_t0=0

# record NAME START STATUS [TOOK]: one line of the summary (start and length in seconds since the run began; the
# length is from START until now unless given).
record() { printf '%s\t%s\t%s\t%s\n' "$(($2 - T0))" "${4:-$(($(date +%s) - $2))}" "$3" "$1" >>"$RUN/timings"; }

# make_run_starts: passes its input through, recording the `make run` environments the checks start as they
# report them ("make run ready in N s (DIR)").
make_run_starts() {
	local line re='make run ready in ([0-9]+) s \(([^)]*)\)'
	while IFS= read -r line; do
		printf '%s\n' "$line"
		if [[ $line =~ $re ]]; then
			record "environment: make run, real Velero ($(basename "${BASH_REMATCH[2]}"))" \
				"$(($(date +%s) - BASH_REMATCH[1]))" ok "${BASH_REMATCH[1]}"
		fi
	done
}

# step NAME CMD...: CMD in the foreground, timed; its output shown and kept for the test count.
step() {
	local name=$1 log
	shift
	log=$RUN/step.$(date +%s%N).log
	echo "== $name"
	current=$name current_t0=$(date +%s)
	"$@" 2>&1 | tee "$log"
	record "$name" "$current_t0" ok
	current=''
}

# job NAME [nice] CMD...: CMD in the background, in a process group of its own, its output in $RUN/NAME.log;
# `await NAME` waits for it. "nice": at the lowest CPU priority, so that it takes only what the tests leave.
job() {
	local name=$1 prio=0
	shift
	if [[ $1 == nice ]]; then prio=19 && shift; fi
	echo "== $name: started in the background (log $RUN/$name.log)"
	set -m
	(
		t=$(date +%s)
		if ((prio)); then
			renice -n "$prio" -p "$BASHPID" >/dev/null
			ionice -c 3 -p "$BASHPID" 2>/dev/null || true
		fi
		# In a subshell of its own, not in a condition: `set -e` holds in the functions CMD calls.
		("$@") >"$RUN/$name.log" 2>&1 &
		if wait $!; then record "$name" "$t" ok && echo 0 >"$RUN/$name.rc"; else
			rc=$?
			record "$name" "$t" "failed ($rc)"
			echo "$rc" >"$RUN/$name.rc"
			exit "$rc"
		fi
	) &
	job_pid[$name]=$!
	set +m
}

# await NAME...: waits for the jobs, in the order they end; prints each one's output; fails as soon as one fails
# (the others are stopped on exit).
await() {
	local name rc pids done_name
	while :; do
		pids=()
		for name in "$@"; do [[ -n ${job_pid[$name]:-} ]] && pids+=("${job_pid[$name]}"); done
		((${#pids[@]})) || return 0
		# Each job writes its exit status when it ends: `wait -n` cannot be trusted with a job that ended while
		# another was waited for (with job control on, bash may have dropped it from its table: "no such job").
		done_name=''
		for name in "$@"; do
			[[ -n ${job_pid[$name]:-} ]] || continue
			if [[ -e "$RUN/$name.rc" ]]; then done_name=$name && break; fi
			# Gone without a status (killed): a failure. The status is written before the job ends.
			if ! kill -0 "${job_pid[$name]}" 2>/dev/null && [[ ! -e "$RUN/$name.rc" ]]; then
				echo 125 >"$RUN/$name.rc" && done_name=$name && break
			fi
		done
		if [[ -z $done_name ]]; then
			sleep 1
			continue
		fi
		name=$done_name
		rc=$(<"$RUN/$name.rc")
		wait "${job_pid[$name]}" 2>/dev/null || true
		# Quoted so that bash expands the subscript itself: a name with an apostrophe ("make run's") expanded
		# first is not found by unset, and the job would be reported again and again.
		unset -v 'job_pid[$name]'
		[[ -z ${job_pid[$name]:-} ]] || { echo "test: cannot forget the job $name" >&2 && exit 1; }
		echo "== $name: done in the background$( ((rc)) && echo ", FAILED (exit $rc)"):"
		sed 's/^/   | /' "$RUN/$name.log"
		((rc == 0)) || exit "$rc"
	done
}

cleanup() {
	local status=$? name dir
	trap - EXIT
	[[ -n $current ]] && record "$current" "$current_t0" failed
	for name in "${!job_pid[@]}"; do
		kill -TERM -- "-${job_pid[$name]}" 2>/dev/null || true
	done
	for name in "${!job_pid[@]}"; do
		wait "${job_pid[$name]}" 2>/dev/null || true
		[[ $status == 0 ]] || { echo "== $name (stopped): last lines of its log:" && tail -n 30 "$RUN/$name.log"; }
	done
	while read -r dir; do
		[[ -n $dir ]] && { CLUSTER_DIR=$dir hack/cluster-down.sh || true; }
	done <"$RUN/started"
	summary
	rm -rf "$RUN"
	exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

summary() {
	echo
	echo "== time per phase (started at m:ss, took m:ss; side-by-side phases overlap)"
	sort -n "$RUN/timings" | while IFS=$'\t' read -r start took status name; do
		printf '  %3d:%02d  %3d:%02d  %-7s %s\n' $((start / 60)) $((start % 60)) $((took / 60)) $((took % 60)) \
			"${status%% *}" "$name"
	done
	local total=$(($(date +%s) - T0))
	printf '  total %d:%02d (%d s)\n' $((total / 60)) $((total % 60)) "$total"
	local passed failed
	passed=$(cat "$RUN"/*.log 2>/dev/null | grep -Eo 'test result: [a-zA-Z]+\. [0-9]+ passed' | awk '{s += $4} END {print s + 0}')
	failed=$(cat "$RUN"/*.log 2>/dev/null | grep -Eo '[0-9]+ failed;' | awk '{s += $1} END {print s + 0}')
	echo "tests: $passed passed, $failed failed"
	echo "Velero restarted for a stalled queue (velero#10519): $(velero_restarts) time(s), at most $MAX_VELERO_RESTARTS"
	[[ -s $VELERO_RESTARTS_LOG ]] && sed 's/^/  /' "$VELERO_RESTARTS_LOG"
	if $node_missing; then
		echo "test: FAILED: the node suite was required (TEST_NODE=1) and did not run: it needs root" >&2
	elif [[ ${TEST_NODE:-} == 0 ]]; then
		echo "test: the node suite (tests/e2e_node.rs) was left out (TEST_NODE=0)" >&2
	fi
	if ! $node_suite && [[ ${TEST_NODE:-} != 0 ]]; then
		cat >&2 <<-'EOF'

			==========================================================================================
			 NOT RUN: the node suite (tests/e2e_node.rs): nac's image installed by Helm on a real node,
			 file-system backup and restore of volume data by Velero's node agent, the leader pod and
			 Velero's pods killed, helm upgrade and uninstall. It needs root (containerd, the kubelet,
			 iptables, a bridge). Run it with `sudo make test`, or alone with
			 `sudo make node-up e2e-node cluster-down`. CI runs it (.ci/run sets TEST_NODE=1).
			==========================================================================================
		EOF
	fi
}

velero_restarts() { if [[ -f $VELERO_RESTARTS_LOG ]]; then wc -l <"$VELERO_RESTARTS_LOG"; else echo 0; fi; }

# up DIR MODE: the environment in DIR, started (and stopped at the end) here unless it already runs.
up() {
	local t
	t=$(date +%s)
	if ! CLUSTER_DIR=$1 hack/cluster-up.sh --status >/dev/null 2>&1; then
		echo "$1" >>"$RUN/started"
	fi
	CLUSTER_DIR=$1 VELERO_MODE=$2 make --no-print-directory cluster-up
	CLUSTER_DIR=$1 hack/install-crds.sh "$TARGET/debug/nac"
	# Velero learns the API's kinds when it starts: restarted, it backs up nac's kinds unless told not to, so
	# the tests that look for them in a backup's resource list can find them.
	if [[ $2 == real ]]; then CLUSTER_DIR=$1 hack/velero-up.sh --restart; fi
	record "environment: $2 Velero ($(basename "$1"))" "$t" ok
}

# tests NAME...: the test binaries NAME (integration test targets; `lib` and `bin:NAME` for unit tests), one
# after the other, from the repository root as cargo runs them; extra arguments in TEST_ARGS.
tests() {
	local name exe t rc
	for name in "$@"; do
		exe=$(awk -v n="$name" '$1 == n {print $2}' "$RUN/binaries")
		[[ -n $exe ]] || { echo "test: no test binary $name" && return 1; }
		echo "     Running $name ($exe)"
		t=$(date +%s)
		rc=0
		# shellcheck disable=SC2086
		"$exe" ${TEST_ARGS:-} || rc=$?
		record "suite: $name${SUITE_NOTE:+ ($SUITE_NOTE)}" "$t" "$( ((rc)) && echo "failed ($rc)" || echo ok)"
		echo "test: $name${SUITE_NOTE:+ ($SUITE_NOTE)}: $( ((rc)) && echo FAILED || echo ok) in $(($(date +%s) - t)) s" >&3
		((rc == 0)) || return "$rc"
	done
}

# ---------------------------------------------------------------------------------------------------- lint, builds
step "lint: cargo fmt, links between documents, import cycles, BENCHMARKS.md's size" bash -c \
	'cargo fmt --all -- --check && hack/docs-check.sh links && hack/import-cycles.py src && hack/benchmarks-size.sh'

# The Go binaries, beside the Rust build: the control plane's (every environment) and Velero's (the real lanes)
# first; the rest, needed later, at the lowest priority from the start, so they take what CPU the builds and
# suites leave idle (on a cold machine the node suite waits for the last of them).
go_chain() {
	local set t
	for set in "$@"; do
		t=$(date +%s)
		hack/go-tools.sh "$set" || { touch "$RUN/go.failed" && return 1; }
		record "build: Go tools: $set" "$t" ok
		touch "$RUN/go-$set.done"
	done
}
go_later=(helm)
if $node_suite; then go_later+=(csi node images); fi
job "build: Go tools" go_chain control-plane velero
job "build: Go tools, needed later" nice go_chain "${go_later[@]}"

# nac's release build and image for the node suite, at the lowest priority from the start as well (the debug
# build has target/debug to itself: cargo locks a profile's directory, not the whole target directory).
if $node_suite; then
	image() {
		cargo build --release --bin nac
		hack/images.sh nac "$TARGET/release/nac"
	}
	job "build: nac, release, and its image" nice image
fi

# One debug build for clippy and every test: clippy-driver compiles nac's own targets (lints, -D warnings, and
# code), rustc its dependencies. The test binaries' paths come from cargo's messages.
rust_debug() {
	RUSTC_WORKSPACE_WRAPPER=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) \
		CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__ \
		cargo build --all-targets --features "$FEATURES" --message-format=json-render-diagnostics >"$RUN/cargo.json"
	python3 - "$RUN/cargo.json" >"$RUN/binaries" <<-'PY'
		import json, sys
		for line in open(sys.argv[1]):
		    m = json.loads(line)
		    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
		        continue
		    kind, name = m["target"]["kind"][0], m["target"]["name"]
		    if kind in ("test", "lib", "bin"):  # benchmarks are measurements, not tests
		        print({"test": name, "lib": "lib", "bin": f"bin:{name}"}[kind], m["executable"])
	PY
}
step "lint (clippy) and build: nac, debug, every target, features $FEATURES" rust_debug

# Every test binary runs below: one not named here (a new file in tests/) fails the run rather than go unrun.
unit_tests=(lib bin:nac bin:kubectl-nac bin:nac-loadgen webhook cert_rotation serve store_memory oadp_api)
fake_tests=(e2e_webhooks e2e_policy e2e_tiers e2e_controller e2e_ha e2e_restart e2e_rbac_rules e2e_migration e2e_oadp_cli)
chart_tests=(e2e_webhooks e2e_controller e2e_policy e2e_ha) # against what the chart installs
real_tests=(e2e_velero e2e_rights_locations e2e_plugin e2e_migration_velero)
# These stop and kill Velero's parts (e2e_attempts stops Velero to swap a tarball under it): an environment of their own.
faults_tests=(e2e_velero_restarts e2e_faults e2e_attempts)
measurements=(admission_bench velero_bench) # empty without the feature scale
unscheduled=$(awk '{print $1}' "$RUN/binaries" | grep -vxF -f <(printf '%s\n' "${unit_tests[@]}" "${fake_tests[@]}" \
	"${real_tests[@]}" "${faults_tests[@]}" chart e2e_node scale_run "${measurements[@]}") || true)
if [[ -n $unscheduled ]]; then
	echo "test: test binaries that hack/test.sh does not run: $unscheduled (add them to a lane)" >&2
	exit 1
fi

# await_go SET: waits until the Go binaries of SET are built (from any job: it watches files, not processes).
await_go() {
	while [[ ! -f $RUN/go-$1.done ]]; do
		if [[ -f $RUN/go.failed ]]; then
			echo "test: the Go build failed (log $RUN/build: Go tools.log):"
			tail -n 40 "$RUN/build: Go tools.log"
			return 1
		fi
		sleep 1
	done
}

# ------------------------------------------------------------------------------------------------------ suites
step "suite: unit and handler tests" tests "${unit_tests[@]}"

fake_lane() {
	await_go control-plane
	up "$CLUSTER_DIR" fake
	SUITE_NOTE="fake Velero" tests "${fake_tests[@]}"
	# The write, read and review budget per NonAdminBackup, asserted on a small scale run (200 over 20 tenants; the
	# figures printed): tests/scale_run.rs, as `make scale` runs it at 10,000, on a control plane of its own (the
	# suites above leave objects whose reconciles are not the run's).
	up "$SCALE_CLUSTER_DIR" fake
	CLUSTER_DIR=$SCALE_CLUSTER_DIR SCALE_NAMESPACES=20 SCALE_PER_NAMESPACE=10 SCALE_RESTART_ROUNDS=0 \
		TEST_ARGS=--nocapture SUITE_NOTE="fake Velero, 200 NonAdminBackups, $(basename "$SCALE_CLUSTER_DIR")" \
		tests scale_run
	await_go helm
	tests chart
	local t
	t=$(date +%s)
	CLUSTER_DIR="$ROOT/.cluster-chart" hack/chart-test.sh
	record "suite: Helm chart (hack/chart-test.sh, its own control plane)" "$t" ok
	# NAC_E2E_CHART=1: the harness installs charts/nac with `helm upgrade --install` (webhooks by URL at the local
	# nac, the chart's RBAC, user roles and policy ConfigMap) and runs nac with a token of the chart's
	# ServiceAccount. On a fresh control plane the chart installs the CRDs (crds/); on one left running, apply
	# them first, as for an upgrade (Helm never upgrades crds/). e2e_restart is left out: it restarts the API
	# server, which tests nac's watches, not anything the chart installs.
	t=$(date +%s)
	if CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR hack/cluster-up.sh --status >/dev/null 2>&1; then
		CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR hack/install-crds.sh -f charts/nac/crds
	else
		echo "$E2E_CHART_CLUSTER_DIR" >>"$RUN/started"
		CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR VELERO_MODE=fake make --no-print-directory cluster-up
	fi
	record "environment: fake Velero ($(basename "$E2E_CHART_CLUSTER_DIR"))" "$t" ok
	CLUSTER_DIR=$E2E_CHART_CLUSTER_DIR NAC_E2E_CHART=1 SUITE_NOTE="against the Helm chart" tests "${chart_tests[@]}"
	await_go velero
	t=$(date +%s)
	DOCS_CLUSTER_DIR=${TEST_DOCS_CLUSTER_DIR:-$ROOT/.cluster-docs} hack/docs-check.sh blocks 2>&1 | make_run_starts
	record "suite: documentation's command blocks (a make run environment, .cluster-docs)" "$t" ok
}

# The real-Velero suites in two environments side by side: most of their time is waiting for Velero, which
# works through one backup at a time (and rechecks its queue once a minute).
real_lane() {
	await_go velero
	up "$VELERO_CLUSTER_DIR" real
	SUITE_NOTE="real Velero" tests "${real_tests[@]}"
	local t
	t=$(date +%s)
	SIGNALS_CLUSTER_DIR=${TEST_SIGNALS_CLUSTER_DIR:-$ROOT/.cluster-signals} hack/run-signals-check.sh 2>&1 | make_run_starts
	record "suite: make run stopped by Ctrl-C, SIGTERM, SIGHUP (.cluster-signals, four make runs)" "$t" ok
}

faults_lane() {
	await_go velero
	up "$FAULTS_CLUSTER_DIR" real
	VELERO_CLUSTER_DIR=$FAULTS_CLUSTER_DIR SUITE_NOTE="real Velero, $(basename "$FAULTS_CLUSTER_DIR")" \
		tests "${faults_tests[@]}"
}

job "lane: fake Velero, chart, docs" fake_lane
job "lane: real Velero, make run's signals" real_lane
job "lane: real Velero, restarts and faults" faults_lane
await "lane: fake Velero, chart, docs" "lane: real Velero, make run's signals" "lane: real Velero, restarts and faults"

# ------------------------------------------------------------------------------------------------------- node
if $node_suite; then
	await "build: nac, release, and its image"
	node_suite() {
		hack/containerfile-check.sh
		await_go images
		await_go csi
		# The node's own CSI driver: its unit tests (the mount tests need root, which the node suite has).
		(cd tools/csi-hostpath && test -z "$(gofmt -l .)" && go vet ./... && go test ./...)
		local before t
		before=$RUN/machine-before
		hack/node-check-clean.sh --snapshot "$before"
		t=$(date +%s)
		if ! CLUSTER_DIR=$NODE_CLUSTER_DIR hack/cluster-up.sh --status >/dev/null 2>&1; then
			echo "$NODE_CLUSTER_DIR" >>"$RUN/started"
		fi
		CLUSTER_DIR=$NODE_CLUSTER_DIR NODE=1 make --no-print-directory cluster-up
		record "environment: a real node ($(basename "$NODE_CLUSTER_DIR"))" "$t" ok
		NODE_CLUSTER_DIR=$NODE_CLUSTER_DIR TEST_ARGS=--test-threads=1 SUITE_NOTE="a real node" tests e2e_node
		# The node leaves the machine as it found it: checked here, so a later run (a developer's, CI's) starts
		# clean.
		CLUSTER_DIR=$NODE_CLUSTER_DIR hack/cluster-down.sh
		grep -vxF "$NODE_CLUSTER_DIR" "$RUN/started" >"$RUN/started.new" || true
		mv "$RUN/started.new" "$RUN/started"
		hack/node-check-clean.sh "$before"
	}
	step "nac as it ships: the Containerfile, a real node" node_suite
fi
await "build: Go tools" "build: Go tools, needed later"

$node_missing && exit 1
if (($(velero_restarts) > MAX_VELERO_RESTARTS)); then
	echo "test: FAILED: Velero was restarted $(velero_restarts) times for a stalled backup queue (at most $MAX_VELERO_RESTARTS)" >&2
	exit 1
fi
exit 0
