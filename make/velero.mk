# Real Velero and a real S3 server for the local environment: the Velero server and its AWS object-store
# plugin (module tools/velero) and versitygw (module tools/s3), built from pinned Go modules into bin/.
# hack/velero-up.sh runs them beside the control plane; `make cluster-up` does so unless VELERO_MODE=fake.
#
#   make velero-tools      build bin/velero bin/velero-plugin-for-aws bin/versitygw (missing ones only)

.PHONY: velero-tools

velero-tools:
	hack/go-tools.sh velero
