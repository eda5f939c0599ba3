#!/usr/bin/env bash
# Applies CustomResourceDefinitions to the local cluster and waits until they
# are Established.
#
# usage: hack/install-crds.sh NAC_BINARY   applies the output of `NAC_BINARY crds`
#        hack/install-crds.sh -f PATH      applies a manifest file or directory
# env:   CLUSTER_DIR (default <repo>/.cluster), KUBECONFIG (default
#        $CLUSTER_DIR/kubeconfig), CRD_TIMEOUT (seconds, default 60)
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

usage="usage: $0 NAC_BINARY | -f FILE_OR_DIR"
kubeconfig=${KUBECONFIG:-$CLUSTER_DIR/kubeconfig}
timeout=${CRD_TIMEOUT:-60}
[[ -x $KUBECTL ]] || die "no kubectl at $KUBECTL (make bin/kubectl)"
[[ -f $kubeconfig ]] || die "no kubeconfig at $kubeconfig (make cluster-up)"
kubectl() { "$KUBECTL" --kubeconfig "$kubeconfig" "$@"; }

tmp=''
trap '[[ -z $tmp ]] || rm -f "$tmp"' EXIT
case ${1:-} in
-f)
	[[ $# -eq 2 && -e $2 ]] || die "$usage"
	manifests=$2
	what=$2
	;;
'' | -*) die "$usage" ;;
*)
	[[ $# -eq 1 ]] || die "$usage"
	nac=$1
	[[ -x $nac ]] || die "$nac is not an executable"
	tmp=$(mktemp --suffix=.yaml)
	"$nac" crds >"$tmp" || die "$nac crds failed"
	[[ -s $tmp ]] || die "$nac crds printed nothing"
	manifests=$tmp
	what="$nac crds"
	;;
esac

# Server-side apply: no last-applied annotation, which large CRDs overflow.
applied=$(kubectl apply --server-side --force-conflicts --field-manager=nac-hack -f "$manifests" -o name)
crds=$(grep '^customresourcedefinition' <<<"$applied" || true)
[[ -n $crds ]] || die "no CustomResourceDefinition in $what"
# shellcheck disable=SC2086
kubectl wait --for=condition=Established --timeout="${timeout}s" $crds >/dev/null
log "$(wc -l <<<"$crds") CRDs established from $what"
