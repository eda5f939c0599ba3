# Local Kubernetes environment for nac's local runs and integration tests:
# etcd, kube-apiserver and kube-controller-manager as unprivileged loopback
# processes (no scheduler, no kubelet, no images), plus a real Velero server
# and S3 server (make/velero.mk, hack/velero-up.sh) unless VELERO_MODE=fake.
#
# Included by the top-level Makefile; paths are relative to the repository
# root (run make from there, or with -C).
#
#   make cluster-up        build missing binaries, start etcd, apiserver and
#                          controller-manager, install the Velero CRDs, then
#                          start S3 + Velero (real) or write an Available
#                          default BSL (VELERO_MODE=fake)
#   make cluster-down      stop Velero, S3, controller-manager, apiserver, etcd
#   make cluster-clean     cluster-down, then remove $(CLUSTER_DIR)
#   make cluster-status    say whether the cluster in $(CLUSTER_DIR) is up
#   make cluster-tools     build bin/kube-apiserver bin/kube-controller-manager
#                          bin/etcd bin/kubectl (one go build)
#   make node-tools        build the node's bin/kubelet bin/kube-proxy
#                          bin/kube-scheduler, bin/velero-restore-helper, and its
#                          CSI binaries (bin/csi-hostpath, bin/csi-provisioner,
#                          bin/csi-snapshotter, bin/snapshot-controller)
#   make go-tools          build every Go binary of the environment
#   make velero-crds       copy the pinned Velero CRDs to $(CLUSTER_DIR)/velero-crds
#   make helm              build bin/helm (separate module tools/helm)
#   make install-crds      apply `$(NAC_BIN) crds` and wait for Established
#
# Variables (environment or command line):
#   CLUSTER_DIR       state directory (default .cluster); one cluster per dir
#   VELERO_MODE       real (default: Velero + S3 run) or fake (tests play Velero)
#   VELERO_NAMESPACE  namespace of the Velero install (default openshift-adp)
#   VELERO_VERSION    Velero release whose CRDs are installed (default below)
#   NAC_BIN           nac binary for install-crds (default target/debug/nac)

GO ?= go
CLUSTER_DIR ?= .cluster
VELERO_MODE ?= real
VELERO_NAMESPACE ?= openshift-adp
VELERO_VERSION ?= v1.18.3
NAC_BIN ?= target/debug/nac

export CLUSTER_DIR VELERO_MODE VELERO_NAMESPACE VELERO_VERSION GO

# The Go binaries, built by hack/go-tools.sh from the modules pinned under tools/: one `go build` per module for
# every binary asked of it at once (shared packages compiled once), each only when missing or older than its
# module's go.mod/go.sum. `make bin/NAME` builds one; the sets below build several in one go.
GO_TOOLS := kube-apiserver kube-controller-manager kubectl etcd kubelet kube-proxy kube-scheduler \
	velero velero-plugin-for-aws velero-restore-helper versitygw helm

$(addprefix bin/,$(GO_TOOLS)):
	hack/go-tools.sh $(notdir $@)

.PHONY: cluster-tools node-tools go-tools cluster-up cluster-down cluster-clean cluster-status velero-crds helm \
	install-crds $(addprefix bin/,$(GO_TOOLS))

cluster-tools:
	hack/go-tools.sh control-plane

# The node's binaries (NODE=1, root), its CSI driver and sidecars, and the extra one its Velero image holds.
node-tools:
	hack/go-tools.sh node images csi

# Every Go binary of the local environment, the node's included.
go-tools:
	hack/go-tools.sh all

helm:
	hack/go-tools.sh helm

velero-crds:
	hack/velero-crds.sh "$(CLUSTER_DIR)/velero-crds"

cluster-up: cluster-tools $(if $(filter fake,$(VELERO_MODE)),,velero-tools)
	hack/cluster-up.sh

cluster-down:
	hack/cluster-down.sh

cluster-clean:
	hack/cluster-down.sh --clean

cluster-status:
	@hack/cluster-up.sh --status

# nac's own CRDs, from `$(NAC_BIN) crds`, into the running cluster.
install-crds:
	hack/install-crds.sh "$(NAC_BIN)"
