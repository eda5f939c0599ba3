#!/usr/bin/env bash
# Stopping `make run` is a fault too: Ctrl-C, SIGTERM and SIGHUP, to its whole process group (a terminal's
# Ctrl-C or hang-up, `timeout`, which signals make and then make's group) or to make alone (a CI cancellation
# that signals the top process), must leave nothing running: no etcd, API server, controller manager, Velero,
# S3 server or nac of that run. Each case starts `make run` (RUN_NODE=0: nac as a local process) in its own
# environment ($SIGNALS_CLUSTER_DIR, default .cluster-signals), waits for its walkthrough, sends the signal and
# checks what is left. Run by `make test`; `make run-signals-check` runs it alone.
#
# usage: hack/run-signals-check.sh [CASE...]   CASE: group:INT group:TERM group:HUP make:TERM (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
DIR=${SIGNALS_CLUSTER_DIR:-$ROOT/.cluster-signals}
cases=("$@")
((${#cases[@]})) || cases=(group:INT group:TERM group:HUP make:TERM)

export CLUSTER_DIR=$DIR
# shellcheck source=hack/lib/cluster.sh
. hack/lib/cluster.sh

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# left PORT: what of the run is still running: the environment's servers (their command lines name $DIR) and
# the nac process serving on PORT.
left() {
	local name p
	for name in etcd kube-apiserver kube-controller-manager velero versitygw; do
		for p in $(pids_of_cluster "$name"); do echo "$name (pid $p)"; done
	done
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		pid_is nac "$p" || continue
		tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "NAC_WEBHOOK__LISTEN=127.0.0.1:$1" && echo "nac (pid $p)"
	done
	return 0
}

make_pid=
trap '[[ -n $make_pid ]] && kill -KILL -- "-$make_pid" 2>/dev/null; CLUSTER_DIR=$DIR hack/cluster-down.sh >/dev/null 2>&1 || true' EXIT

failed=0 n=0
for case in "${cases[@]}"; do
	target=${case%%:*} sig=${case#*:}
	port=$(free_port)
	# A log of its own, made before make starts: the walkthrough looked for is this run's.
	log=$DIR.$((++n)).$target-$sig.log
	mkdir -p "$(dirname "$log")"
	: >"$log"
	# Its own process group, as a terminal's job control gives it (set -m): the group signal reaches make,
	# hack/run.sh, nac and whatever runs in the foreground, as Ctrl-C does. Without job control a background
	# command starts with SIGINT ignored, and Ctrl-C would not be what is tested.
	# The signals at their defaults, as a terminal's session starts: run under nohup, or by a runner that ignores
	# SIGHUP, every process would inherit the ignored signal (a shell cannot trap it then) and nothing be tested.
	set -m
	CLUSTER_DIR=$DIR RUN_NODE=0 RUN_WEBHOOK_PORT=$port RUN_METRICS_PORT=$(free_port) \
		env --default-signal=HUP,INT,TERM make --no-print-directory run </dev/null >"$log" 2>&1 &
	make_pid=$!
	set +m
	started=$SECONDS
	until grep -q 'Ctrl-C stops nac' "$log"; do
		if ! kill -0 "$make_pid" 2>/dev/null || ((SECONDS - started > 600)); then
			echo "run-signals-check: $case: make run did not reach its walkthrough; last lines of $log:" >&2
			tail -n 20 "$log" >&2
			exit 1
		fi
		sleep 0.5
	done
	echo "run-signals-check: $case: make run ready in $((SECONDS - started)) s ($DIR)"
	sleep 2 # nac logging, as a user would be reading the walkthrough
	t0=$SECONDS
	if [[ $target == group ]]; then kill "-$sig" -- "-$make_pid"; else kill "-$sig" "$make_pid"; fi
	# Done when the process group is empty: make, hack/run.sh and its cleanup (make itself may return first: on
	# SIGTERM GNU make passes the signal on and exits without waiting for its recipe). The servers run in
	# sessions of their own, so a cleanup cut short leaves them behind, and that is what is looked for.
	for ((i = 0; i < 1200; i++)); do pgrep -g "$make_pid" >/dev/null || break; sleep 0.1; done
	if pgrep -g "$make_pid" >/dev/null; then
		echo "run-signals-check: $case: make run still running 120 s after SIG$sig" >&2
		failed=1
	fi
	wait "$make_pid" 2>/dev/null || true
	rest=$(left "$port")
	if [[ -n $rest ]]; then
		echo "run-signals-check: $case: SIG$sig left running:" >&2
		echo "$rest" | sed 's/^/  /' >&2
		tail -n 15 "$log" | sed 's/^/  | /' >&2
		failed=1
	elif ! grep -q "cluster in $DIR is down" "$log"; then
		echo "run-signals-check: $case: the environment's teardown did not run; last lines of $log:" >&2
		tail -n 15 "$log" | sed 's/^/  | /' >&2
		failed=1
	else
		echo "run-signals-check: $case: SIG$sig: make run stopped in $((SECONDS - t0)) s, nothing left running"
	fi
	make_pid=
	CLUSTER_DIR=$DIR hack/cluster-down.sh >/dev/null 2>&1 || true
done
exit "$failed"
