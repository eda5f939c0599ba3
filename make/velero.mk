# Real Velero and a real S3 server for the local environment: the Velero server and its AWS object-store
# plugin (module tools/velero) and versitygw (module tools/s3), built from pinned Go modules into bin/.
# hack/velero-up.sh runs them beside the control plane; `make cluster-up` does so unless VELERO_MODE=fake.
#
#   make velero-tools      build bin/velero bin/velero-plugin-for-aws bin/versitygw (missing ones only)

VELERO_BINS := bin/velero bin/velero-plugin-for-aws bin/versitygw

VELERO_BUILD_VERSION = $(eval VELERO_BUILD_VERSION := $$(shell cd tools/velero && $$(GO) list -m -f '{{.Version}}' github.com/vmware-tanzu/velero))$(VELERO_BUILD_VERSION)
# controller-runtime's own metrics listener binds *:8080 unconditionally (not Velero's --metrics-address):
# "0" turns it off, so several Velero servers, and nac's metrics, can share the machine.
VELERO_LDFLAGS = -s -w \
	-X github.com/vmware-tanzu/velero/pkg/buildinfo.Version=$(VELERO_BUILD_VERSION) \
	-X github.com/vmware-tanzu/velero/pkg/buildinfo.GitTreeState=clean \
	-X sigs.k8s.io/controller-runtime/pkg/metrics/server.DefaultBindAddress=0

VELERO_GO_BUILD = cd tools/velero && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false

bin/velero: tools/velero/go.mod tools/velero/go.sum
	@mkdir -p bin
	$(VELERO_GO_BUILD) -ldflags '$(VELERO_LDFLAGS)' -o ../../$@.tmp github.com/vmware-tanzu/velero/cmd/velero
	@mv -f $@.tmp $@

# The helper that Velero's restore-wait init container runs (in the Velero image, see hack/images.sh).
bin/velero-restore-helper: tools/velero/go.mod tools/velero/go.sum
	@mkdir -p bin
	$(VELERO_GO_BUILD) -ldflags '-s -w' -o ../../$@.tmp github.com/vmware-tanzu/velero/cmd/velero-restore-helper
	@mv -f $@.tmp $@

bin/velero-plugin-for-aws: tools/velero/go.mod tools/velero/go.sum
	@mkdir -p bin
	$(VELERO_GO_BUILD) -ldflags '-s -w' -o ../../$@.tmp \
		github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws
	@mv -f $@.tmp $@

bin/versitygw: tools/s3/go.mod tools/s3/go.sum
	@mkdir -p bin
	cd tools/s3 && CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=false -ldflags '-s -w' \
		-o ../../$@.tmp github.com/versity/versitygw/cmd/versitygw
	@mv -f $@.tmp $@

.PHONY: velero-tools

# One after the other (two cores): Velero first, so the plugin build reuses most of its cache.
velero-tools:
	@for b in $(VELERO_BINS); do \
		$(MAKE) -q --no-print-directory $$b 2>/dev/null || $(MAKE) --no-print-directory $$b || exit 1; \
	done
