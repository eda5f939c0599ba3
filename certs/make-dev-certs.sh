#!/usr/bin/env bash
# Makes a development CA and a webhook serving certificate for nac with `nac certs`, and optionally stores them
# as the kubernetes.io/tls Secret that the chart's certs.mode=existing mounts.
#
# usage: certs/make-dev-certs.sh [options]
#   -s, --service NAME     Service the API server calls nac by (default nac: the chart's name for release "nac";
#                          for another release RELEASE it is RELEASE-nac unless RELEASE contains "nac")
#   -n, --namespace NS     namespace of the Service, i.e. the release namespace (default nac-system)
#   -o, --out DIR          where ca.crt ca.key tls.crt tls.key go (default certs/dev/NS-SERVICE)
#   -H, --host HOST        extra DNS name or IP address (repeatable), e.g. -H 127.0.0.1 for a local nac process
#   -d, --days N           validity in days (default 365)
#   -S, --secret NAME      also create or update Secret NAME in NS (tls.crt, tls.key, ca.crt) with kubectl
#       --nac PATH         nac binary (default: $NAC, else target/debug/nac, else nac on PATH)
#       --kubectl PATH     kubectl binary (default: $KUBECTL, else bin/kubectl, else kubectl on PATH)
#   -h, --help
# The CA key stays in DIR (keep it private or delete it); the Secret never gets it.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
service=nac namespace=nac-system out='' days=365 secret='' hosts=()
nac=${NAC:-} kubectl=${KUBECTL:-}

die() { echo "make-dev-certs: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; }
need() { [[ $# -ge 2 && -n $2 ]] || die "$1 needs a value"; }

while [[ $# -gt 0 ]]; do
	case $1 in
	-s | --service) need "$@"; service=$2; shift 2 ;;
	-n | --namespace) need "$@"; namespace=$2; shift 2 ;;
	-o | --out) need "$@"; out=$2; shift 2 ;;
	-H | --host) need "$@"; hosts+=("$2"); shift 2 ;;
	-d | --days) need "$@"; days=$2; shift 2 ;;
	-S | --secret) need "$@"; secret=$2; shift 2 ;;
	--nac) need "$@"; nac=$2; shift 2 ;;
	--kubectl) need "$@"; kubectl=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument $1" ;;
	esac
done

dns1123='^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'
[[ $service =~ $dns1123 ]] || die "service name '$service' is not a valid DNS label"
[[ $namespace =~ $dns1123 ]] || die "namespace '$namespace' is not a valid DNS label"
[[ $days =~ ^[1-9][0-9]*$ ]] || die "--days must be a positive number"

if [[ -z $nac ]]; then
	if [[ -x $root/target/debug/nac ]]; then
		nac=$root/target/debug/nac
	elif command -v nac >/dev/null; then
		nac=$(command -v nac)
	else
		die "no nac binary: run 'cargo build' or pass --nac PATH"
	fi
fi
[[ -x $nac ]] || die "$nac is not executable"
out=${out:-$root/certs/dev/$namespace-$service}

args=(certs --service "$service" --namespace "$namespace" --days "$days" --out "$out")
for h in "${hosts[@]}"; do args+=(--host "$h"); done
(umask 077 && mkdir -p "$out")
"$nac" "${args[@]}"
chmod 600 "$out/ca.key" "$out/tls.key"

if [[ -n $secret ]]; then
	if [[ -z $kubectl ]]; then
		if [[ -x $root/bin/kubectl ]]; then kubectl=$root/bin/kubectl; else kubectl=kubectl; fi
	fi
	"$kubectl" create namespace "$namespace" --dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
	"$kubectl" -n "$namespace" create secret generic "$secret" --type=kubernetes.io/tls \
		--from-file=tls.crt="$out/tls.crt" --from-file=tls.key="$out/tls.key" --from-file=ca.crt="$out/ca.crt" \
		--dry-run=client -o yaml | "$kubectl" apply -f - >/dev/null
	echo "Secret $namespace/$secret holds tls.crt, tls.key, ca.crt"
fi

cat <<TXT
Install the chart with this certificate:
  helm install nac charts/nac -n $namespace --create-namespace \\
    --set certs.mode=existing --set certs.existing.secretName=${secret:-SECRET} \\
    --set-file certs.existing.caBundle=$out/ca.crt
TXT
