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
#                          bin/etcd bin/kubectl
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

CLUSTER_BINS := bin/kube-apiserver bin/kube-controller-manager bin/etcd bin/kubectl

export CLUSTER_DIR VELERO_MODE VELERO_NAMESPACE VELERO_VERSION GO

# Version stamped into kube-apiserver and kubectl, read from tools/go.mod so
# that /version reports the pinned release. Evaluated on first use only (so
# `go list` runs only when a binary is actually built), then memoised.
K8S_VERSION = $(eval K8S_VERSION := $$(shell cd tools && $$(GO) list -m -f '{{.Version}}' k8s.io/kubernetes))$(K8S_VERSION)
K8S_BUILD_DATE = $(eval K8S_BUILD_DATE := $$(shell cd tools && $$(GO) list -m -f '{{.Time.UTC.Format "2006-01-02T15:04:05Z"}}' k8s.io/kubernetes))$(K8S_BUILD_DATE)
K8S_VERSION_VARS = \
	gitVersion=$(K8S_VERSION) \
	gitMajor=$(word 1,$(subst ., ,$(patsubst v%,%,$(K8S_VERSION)))) \
	gitMinor=$(word 2,$(subst ., ,$(patsubst v%,%,$(K8S_VERSION)))) \
	gitCommit=0000000000000000000000000000000000000000 \
	gitTreeState=clean \
	buildDate=$(K8S_BUILD_DATE)
K8S_LDFLAGS = -s -w $(foreach kv,$(K8S_VERSION_VARS),\
	-X k8s.io/component-base/version.$(kv) -X k8s.io/client-go/pkg/version.$(kv))

# One binary at a time (the machine has two cores); each recipe is a plain
# `go build` of an upstream main package pinned by tools/go.mod.
TOOLS_GO_BUILD = cd tools && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false

bin/kube-apiserver: tools/go.mod tools/go.sum
	@mkdir -p bin
	$(TOOLS_GO_BUILD) -ldflags '$(K8S_LDFLAGS)' -o ../$@.tmp k8s.io/kubernetes/cmd/kube-apiserver
	@mv -f $@.tmp $@

bin/kube-controller-manager: tools/go.mod tools/go.sum
	@mkdir -p bin
	$(TOOLS_GO_BUILD) -ldflags '$(K8S_LDFLAGS)' -o ../$@.tmp k8s.io/kubernetes/cmd/kube-controller-manager
	@mv -f $@.tmp $@

bin/kubectl: tools/go.mod tools/go.sum
	@mkdir -p bin
	$(TOOLS_GO_BUILD) -ldflags '$(K8S_LDFLAGS)' -o ../$@.tmp k8s.io/kubernetes/cmd/kubectl
	@mv -f $@.tmp $@

# The node's binaries (make/node.mk): built like the control plane's, from the same pinned module.
bin/kubelet bin/kube-proxy bin/kube-scheduler: tools/go.mod tools/go.sum
	@mkdir -p bin
	$(TOOLS_GO_BUILD) -ldflags '$(K8S_LDFLAGS)' -o ../$@.tmp k8s.io/kubernetes/cmd/$(notdir $@)
	@mv -f $@.tmp $@

bin/etcd: tools/go.mod tools/go.sum
	@mkdir -p bin
	$(TOOLS_GO_BUILD) -ldflags '-s -w' -o ../$@.tmp go.etcd.io/etcd/server/v3
	@mv -f $@.tmp $@

HELM_VERSION = $(eval HELM_VERSION := $$(shell cd tools/helm && $$(GO) list -m -f '{{.Version}}' helm.sh/helm/v3))$(HELM_VERSION)
HELM_K8S_MINOR = $(word 2,$(subst ., ,$(shell cd tools/helm && $(GO) list -m -f '{{.Version}}' k8s.io/client-go)))
HELM_LDFLAGS = -s -w \
	-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION) \
	-X helm.sh/helm/v3/internal/version.gitTreeState=clean \
	$(foreach p,pkg/lint/rules pkg/chartutil,\
		-X helm.sh/helm/v3/$(p).k8sVersionMajor=1 -X helm.sh/helm/v3/$(p).k8sVersionMinor=$(HELM_K8S_MINOR))

bin/helm: tools/helm/go.mod tools/helm/go.sum
	@mkdir -p bin
	cd tools/helm && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false \
		-ldflags '$(HELM_LDFLAGS)' -o ../../$@.tmp helm.sh/helm/v3/cmd/helm
	@mv -f $@.tmp $@

.PHONY: cluster-tools cluster-up cluster-down cluster-clean cluster-status velero-crds helm install-crds

# One build after the other, even under make -j: each is its own make run.
cluster-tools:
	@for b in $(CLUSTER_BINS); do \
		$(MAKE) -q --no-print-directory $$b 2>/dev/null || $(MAKE) --no-print-directory $$b || exit 1; \
	done

helm: bin/helm

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
