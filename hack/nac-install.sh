#!/usr/bin/env bash
# Installs nac as it ships onto the node environment (NODE=1 make cluster-up): its image (make image) imported
# into the node's containerd, then `helm upgrade --install` of charts/nac with the chart's defaults (2 replicas,
# selfSigned certificates, webhooks called through the Service) into a namespace that Pod Security `restricted`
# enforces, and waits until every pod is Ready.
#
# usage: hack/nac-install.sh [--policy FILE] [--tag TAG] [-- EXTRA HELM ARGS...]
#   --policy FILE  a policy ConfigMap manifest (policies/*.yaml: its policy.yaml key is used) or a bare policy
#   --tag TAG      the image tag (default: the crate's version; target/image/nac-TAG.tar must exist)
# env: CLUSTER_DIR, NAC_NAMESPACE (default nac-system), NAC_RELEASE (default nac), VELERO_NAMESPACE
set -euo pipefail

# shellcheck source=hack/lib/cluster.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib/cluster.sh"

NAC_NAMESPACE=${NAC_NAMESPACE:-nac-system}
NAC_RELEASE=${NAC_RELEASE:-nac}
ENV_FILE=$CLUSTER_DIR/env
policy='' tag=''
while (($#)); do
	case $1 in
	--policy) policy=$2 && shift 2 ;;
	--tag) tag=$2 && shift 2 ;;
	--) shift && break ;;
	*) die "usage: $0 [--policy FILE] [--tag TAG] [-- HELM ARGS...]" ;;
	esac
done
[[ -f $ENV_FILE ]] || die "no running cluster in $CLUSTER_DIR"
[[ $(env_get NODE) == 1 ]] || die "the cluster in $CLUSTER_DIR has no node (NODE=1 make cluster-up)"
VELERO_NAMESPACE=${VELERO_NAMESPACE:-$(env_get VELERO_NAMESPACE)}
tag=${tag:-$(sed -n 's/^version = "\(.*\)"/\1/p' "$NAC_ROOT/Cargo.toml" | head -n 1)}
archive=$NAC_ROOT/target/image/nac-$tag.tar
[[ -f $archive ]] || die "no image archive $archive (make image, or TAG=$tag hack/images.sh nac)"
kubectl() { "$KUBECTL" --kubeconfig "$CLUSTER_DIR/kubeconfig" "$@"; }
[[ -x $BIN_DIR/helm ]] || make -C "$NAC_ROOT" --no-print-directory bin/helm

"$NAC_ROOT/hack/node-up.sh" --import "$archive"
repo=$(sed 's/:[^:]*$//' "$archive.name")

kubectl create namespace "$NAC_NAMESPACE" --dry-run=client -o yaml | kubectl apply -f - >/dev/null
# nac runs under the strictest Pod Security level; the API server refuses its pods otherwise.
kubectl label namespace "$NAC_NAMESPACE" --overwrite pod-security.kubernetes.io/enforce=restricted \
	pod-security.kubernetes.io/enforce-version=latest >/dev/null

policy_args=()
if [[ -n $policy ]]; then
	doc=$(mktemp)
	# A ConfigMap manifest from policies/: its policy.yaml key; anything else is taken as the policy itself.
	if grep -q '^kind: ConfigMap' "$policy"; then
		kubectl create --dry-run=client -f "$policy" -o jsonpath='{.data.policy\.yaml}' >"$doc"
	else
		cp "$policy" "$doc"
	fi
	policy_args=(--set-file "policy=$doc")
fi

"$BIN_DIR/helm" --kubeconfig "$CLUSTER_DIR/kubeconfig" upgrade --install "$NAC_RELEASE" "$NAC_ROOT/charts/nac" \
	--namespace "$NAC_NAMESPACE" --set "image.repository=$repo" --set "image.tag=$tag" \
	--set "velero.namespace=$VELERO_NAMESPACE" "${policy_args[@]}" --wait --timeout 3m "$@" >/dev/null
log "nac $tag installed by Helm in $NAC_NAMESPACE ($(kubectl -n "$NAC_NAMESPACE" get pods -l app.kubernetes.io/name=nac --no-headers 2>/dev/null | grep -c ' Running ') pods running)"
