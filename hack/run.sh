#!/usr/bin/env bash
# `make run`: a local environment (control plane, real Velero and S3 server; or the cluster KUBECONFIG points
# at, which must run Velero), nac's CRDs, the strict example policy, a demo tenant with a small application, and
# nac itself, with a walkthrough of a backup and a restore by the namespace user. Ctrl-C stops nac and the
# environment it started.
#
# As root (RUN_NODE=1, the default for root): nac as it ships. A real node runs beside the control plane,
# Velero's server and node agent run in pods, nac's image is built (`make image`) and installed with
# `helm install` (2 replicas, webhooks through the Service), and the walkthrough backs up volume data with the
# node agent. Otherwise (RUN_NODE=0, or not root): nac runs as a local process, registered by URL.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

POLICY=${POLICY:-policies/strict.yaml}
DEMO_NS=${DEMO_NS:-demo}
DEMO_USER=${DEMO_USER:-demo-user}
NAC_NS=nac-system

started_cluster=0
nac_pid=
RUN_NODE=${RUN_NODE:-$( ((EUID == 0)) && [[ -z ${KUBECONFIG:-} ]] && echo 1 || echo 0)}
cleanup() {
	# Nothing interrupts the cleanup: a stop often brings two signals (`timeout` signals make, make passes it on,
	# then `timeout` signals the whole group), and a second one, with the default action back, ended this script
	# mid-cleanup and left the environment running. Every step below ends by itself (cluster-down.sh kills what
	# does not stop in time).
	trap '' INT TERM HUP
	trap - EXIT
	if [[ -n ${watchdog:-} ]]; then kill "$watchdog" 2>/dev/null || true; fi
	if [[ -n $nac_pid ]] && kill -0 "$nac_pid" 2>/dev/null; then
		kill -TERM "$nac_pid" 2>/dev/null || true
		wait "$nac_pid" 2>/dev/null || true
	fi
	if [[ $RUN_NODE != 1 && -n ${KUBECTL:-} && -n ${KUBECONFIG:-} ]]; then
		"$KUBECTL" delete mutatingwebhookconfiguration nac-mutating --ignore-not-found >/dev/null 2>&1 || true
		"$KUBECTL" delete validatingwebhookconfiguration nac-validating --ignore-not-found >/dev/null 2>&1 || true
	fi
	if [[ $started_cluster == 1 ]]; then
		hack/cluster-down.sh || true
	fi
}
trap cleanup EXIT
trap 'trap "" INT TERM HUP; exit 130' INT TERM HUP
# `make run` stopped by a signal to make alone (a `timeout`, a CI cancellation) would leave this script, and all
# it started, running: it follows make (or whatever started it) and stops when that is gone.
parent=${RUN_PARENT_PID:-$PPID}
(
	while kill -0 "$parent" 2>/dev/null; do sleep 1; done
	kill -TERM $$ 2>/dev/null
) &
watchdog=$!

# SKIP_BUILD=1: the debug build there is (make test's checks of make run, which builds it once for all).
[[ ${SKIP_BUILD:-0} == 1 ]] || cargo build --bins
NAC=${CARGO_TARGET_DIR:-$ROOT/target}/debug/nac

if [[ -n ${KUBECONFIG:-} ]]; then
	echo "run: using the cluster in KUBECONFIG=$KUBECONFIG"
	make --no-print-directory bin/kubectl >/dev/null
	KUBECTL=$ROOT/bin/kubectl
	certs=$(mktemp -d)
	"$NAC" certs --out "$certs" --host 127.0.0.1 --host localhost >/dev/null
	WEBHOOK_CA_CERT=$certs/ca.crt WEBHOOK_TLS_CERT=$certs/tls.crt WEBHOOK_TLS_KEY=$certs/tls.key
	VELERO_NAMESPACE=${VELERO_NAMESPACE:-openshift-adp}
else
	export CLUSTER_DIR=${CLUSTER_DIR:-$ROOT/.cluster}
	if ! hack/cluster-up.sh --status >/dev/null 2>&1; then started_cluster=1; fi
	NODE=$RUN_NODE VELERO_MODE=real make --no-print-directory cluster-up
	# shellcheck source=/dev/null
	. "$CLUSTER_DIR/env"
fi
export KUBECONFIG KUBECTL

# The walkthrough's own bucket is on the local S3 server: the policy lets tenants' locations name it
# (nonAdminBSL.allowedEndpoints.hosts), as an admin lists the object stores tenants may use.
policy_doc=$(mktemp)
if [[ -n ${S3_URL:-} ]]; then
	s3_host=${S3_URL#*://}
	"$NAC" policy allow-endpoints "$POLICY" --host "${s3_host%%[:/]*}" >"$policy_doc"
else
	"$KUBECTL" create --dry-run=client -f "$POLICY" -o jsonpath='{.data.policy\.yaml}' >"$policy_doc"
fi
if [[ $RUN_NODE == 1 ]]; then
	# nac as it ships: its image, the chart, the policy as the chart's value.
	make --no-print-directory image
	hack/nac-install.sh --policy "$policy_doc"
else
	hack/install-crds.sh "$NAC"
	"$KUBECTL" create namespace "$NAC_NS" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
	"$KUBECTL" -n "$NAC_NS" create configmap nac-policy --from-file=policy.yaml="$policy_doc" --dry-run=client -o yaml |
		"$KUBECTL" label --local -f - -o yaml app.kubernetes.io/name=nac nac.oadp.openshift.io/policy=true |
		"$KUBECTL" apply -f - >/dev/null
	"$KUBECTL" apply -f hack/demo-rbac.yaml >/dev/null
fi
rm -f "$policy_doc"
"$KUBECTL" create namespace "$DEMO_NS" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" -n "$DEMO_NS" create rolebinding "$DEMO_USER-nab-editor" --clusterrole=nonadminbackup-editor-role \
	--user="$DEMO_USER" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
# The namespace owner also administers their own namespace (Kubernetes' built-in `admin` role), like a real
# tenant: backups read and restores create only what they may themselves (policy `rights`).
"$KUBECTL" -n "$DEMO_NS" create rolebinding "$DEMO_USER-admin" --clusterrole=admin \
	--user="$DEMO_USER" --dry-run=client -o yaml | "$KUBECTL" apply -f - >/dev/null
"$KUBECTL" -n "$DEMO_NS" apply -f hack/demo-app.yaml >/dev/null

port=${RUN_WEBHOOK_PORT:-9443}
metrics_port=${RUN_METRICS_PORT:-8080}
if [[ $RUN_NODE == 1 ]]; then
	# The demo's volume data (step 10): an emptyDir and a claim on a local volume of the node, 1 MiB each.
	pv_dir=$NODE_DIR/local-pv/$DEMO_NS-data
	mkdir -p "$pv_dir" "$NODE_DIR/local-pv/$DEMO_NS-data-2"
	"$KUBECTL" apply -f - >/dev/null <<-EOF
		apiVersion: storage.k8s.io/v1
		kind: StorageClass
		metadata: {name: local-storage}
		provisioner: kubernetes.io/no-provisioner
		volumeBindingMode: WaitForFirstConsumer
		---
		apiVersion: v1
		kind: PersistentVolume
		metadata: {name: $DEMO_NS-data}
		spec:
		  capacity: {storage: 1Gi}
		  accessModes: [ReadWriteOnce]
		  persistentVolumeReclaimPolicy: Retain
		  storageClassName: local-storage
		  local: {path: "$pv_dir"}
		  nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}]}]}}
		---
		apiVersion: v1
		kind: PersistentVolumeClaim
		metadata: {name: orders, namespace: $DEMO_NS}
		spec: {accessModes: [ReadWriteOnce], storageClassName: local-storage, resources: {requests: {storage: 1Gi}}}
		---
		apiVersion: v1
		kind: Pod
		metadata: {name: ledger, namespace: $DEMO_NS, labels: {app: ledger}}
		spec:
		  terminationGracePeriodSeconds: 1
		  containers:
		    - name: ledger
		      image: localhost/toolbox:1
		      imagePullPolicy: Never
		      command: [sh, -c, 'for d in /cache /orders; do test -f \$d/data || head -c 1048576 /dev/urandom > \$d/data; done; exec sleep 1000000']
		      volumeMounts: [{name: cache, mountPath: /cache}, {name: orders, mountPath: /orders}]
		  volumes:
		    - {name: cache, emptyDir: {}}
		    - {name: orders, persistentVolumeClaim: {claimName: orders}}
	EOF
	"$KUBECTL" -n "$DEMO_NS" wait pod/ledger --for=condition=Ready --timeout=120s >/dev/null
else
NAC_WEBHOOK__LISTEN=127.0.0.1:$port NAC_METRICS__LISTEN=127.0.0.1:$metrics_port \
NAC_WEBHOOK__CERT_FILE=$WEBHOOK_TLS_CERT NAC_WEBHOOK__KEY_FILE=$WEBHOOK_TLS_KEY \
NAC_POLICY__NAMESPACE=$NAC_NS NAC_CONTROLLERS__VELERO_NAMESPACE=${VELERO_NAMESPACE:-openshift-adp} \
	"$NAC" serve &
nac_pid=$!

for _ in $(seq 1 100); do
	if curl -fsS "http://127.0.0.1:$metrics_port/readyz" >/dev/null 2>&1; then break; fi
	kill -0 "$nac_pid" 2>/dev/null || { echo "run: nac exited" >&2; exit 1; }
	sleep 0.2
done
"$NAC" webhook-config --url "https://127.0.0.1:$port" --ca-file "$WEBHOOK_CA_CERT" --namespace "$NAC_NS" --velero-namespace "${VELERO_NAMESPACE:-openshift-adp}" |
	"$KUBECTL" apply -f - >/dev/null
fi

K="kubectl --as $DEMO_USER -n $DEMO_NS"
P="$(dirname "$NAC")/kubectl-nac --as $DEMO_USER -n $DEMO_NS"
own=""
if [[ -n ${S3_DATA_DIR:-} ]]; then
	# The demo tenant's own bucket on the local S3 server, and a credentials file for it (step 9).
	curl -sS --max-time 10 --aws-sigv4 "aws:amz:$S3_REGION:s3" --user "$S3_ACCESS_KEY:$S3_SECRET_KEY" \
		-H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855' \
		-X PUT "$S3_URL/$DEMO_NS-own" >/dev/null || true
	printf '[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n' "$S3_ACCESS_KEY" "$S3_SECRET_KEY" \
		>"$CLUSTER_DIR/demo-credentials"
	V="kubectl -n ${VELERO_NAMESPACE:-openshift-adp}"
	own="
 9. Your own bucket (a NonAdminBackupStorageLocation), approved by the cluster admin:
   $K create secret generic my-s3 --from-file=cloud=$CLUSTER_DIR/demo-credentials
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackupStorageLocation
   metadata: {name: own}
   spec:
     backupStorageLocationSpec:
       provider: aws
       objectStorage: {bucket: $DEMO_NS-own, prefix: nightly}
       config: {region: $S3_REGION, s3ForcePathStyle: \"true\", s3Url: \"$S3_URL\"}
       credential: {name: my-s3, key: cloud}
   EOF
   $K get nabsl own                              # REQUEST-APPROVED False: waiting for the admin
   # as the admin (the requests are in Velero's namespace, which $DEMO_USER cannot read):
   $V get nabslrequest
   $V patch nabslrequest \$($V get nabslrequest -o name | head -1 | cut -d/ -f2) --type merge -p '{\"spec\":{\"approvalDecision\":\"approve\"}}'
   $K get nabsl own -w                           # Created, VELERO-PHASE Available
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackup
   metadata: {name: third}
   spec: {backupSpec: {storageLocation: own}}
   EOF
   $K get nab third -w                           # Completed
   $P backup logs third | tail -3                 # its log, with the plugin (a NonAdminDownloadRequest, made and deleted)
   # or by hand:
   # its log, through a NonAdminDownloadRequest (a signed URL, valid 10 minutes; then the request is deleted):
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminDownloadRequest
   metadata: {name: third-log}
   spec: {target: {kind: BackupLog, name: third}}
   EOF
   $K wait nadr/third-log --for=jsonpath='{.status.phase}'=Created
   curl -s \"\$($K get nadr third-log -o jsonpath='{.status.velero.status.downloadURL}')\" | gunzip | tail -3
   find $S3_DATA_DIR/$DEMO_NS-own -type f           # under $DEMO_NS/nightly/: the tenant's bucket, not the admin's
"
fi
if [[ -n ${S3_DATA_DIR:-} ]]; then
	where="   find $S3_DATA_DIR/$S3_BUCKET/$S3_PREFIX/backups -type f       # the bucket of the local S3 server, as plain files
   VB=\$($K get nab first -o jsonpath='{.status.veleroBackup.name}')
   tar -tzf $S3_DATA_DIR/$S3_BUCKET/$S3_PREFIX/backups/\$VB/\$VB.tar.gz | grep $DEMO_NS/  # what is in the tarball"
else
	where="   kubectl -n ${VELERO_NAMESPACE:-openshift-adp} get backupstoragelocations     # the bucket is in your cluster's storage"
fi

volumes=""
if [[ $RUN_NODE == 1 ]]; then
	# The image the Deployment runs (target/image may also hold other tags, e.g. the node suite's upgrade image).
	image=$("$KUBECTL" -n "$NAC_NS" get deployments -o jsonpath='{.items[0].spec.template.spec.containers[0].image}' 2>/dev/null)
	running="nac is running as it ships: image ${image:-?}, 2 pods installed by
 Helm in $NAC_NS on node $NODE_NAME (kubectl -n $NAC_NS get pods); the API server calls its webhooks through the
 Service. Velero's server and node agent run in pods in ${VELERO_NAMESPACE:-openshift-adp}."
	volumes="
10. Volume data: the pod ledger writes 1 MiB into an emptyDir (/cache) and into a claim on a local volume
    (/orders). The policy enforces file-system backup (defaultVolumesToFsBackup), so Velero's node agent copies
    the bytes into the bucket with kopia:
   $K exec ledger -- sha256sum /cache/data /orders/data      # note the checksums
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackup
   metadata: {name: volumes}
   spec: {backupSpec: {}}
   EOF
   $K get nab volumes -o jsonpath='{.status.fileSystemPodVolumeBackups}' -w   # completed: 2, once Completed
   # lose the data: the pod and the claim go, and the admin wipes the volume and provides it again, empty, under
   # its old name (the restored claim names it)
   $K delete pod ledger && $K delete pvc orders
   kubectl delete pv $DEMO_NS-data && rm -rf $NODE_DIR/local-pv/$DEMO_NS-data/*          # as the admin
   kubectl apply -f - <<EOF                                                           # as the admin
   apiVersion: v1
   kind: PersistentVolume
   metadata: {name: $DEMO_NS-data}
   spec: {capacity: {storage: 1Gi}, accessModes: [ReadWriteOnce], persistentVolumeReclaimPolicy: Retain,
          storageClassName: local-storage, local: {path: $NODE_DIR/local-pv/$DEMO_NS-data-2},
          nodeAffinity: {required: {nodeSelectorTerms: [{matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}]}]}}}
   EOF
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminRestore
   metadata: {name: volumes}
   spec: {restoreSpec: {backupName: volumes}}
   EOF
   $K get nar volumes -w                           # Completed: the pod is back, its volumes filled by the node agent
   $K exec ledger -- sha256sum /cache/data /orders/data      # the same checksums

11. Volume data by the data mover instead: a claim of the node's CSI StorageClass ($CSI_STORAGE_CLASS) is snapshotted
    (a copy on the node), and Velero's node agent uploads the snapshot into the bucket, then deletes it. As the
    admin, have the policy enforce it (nac applies the edit within seconds):
   kubectl -n $NAC_NS edit configmap nac-policy   # enforceBackupSpec: {defaultVolumesToFsBackup: false, snapshotVolumes: true, snapshotMoveData: true}
   $K apply -f - <<EOF
   apiVersion: v1
   kind: PersistentVolumeClaim
   metadata: {name: vault, labels: {app: vault}}
   spec: {accessModes: [ReadWriteOnce], storageClassName: $CSI_STORAGE_CLASS, resources: {requests: {storage: 1Gi}}}
   ---
   apiVersion: v1
   kind: Pod
   metadata: {name: vault, labels: {app: vault}}
   spec:
     terminationGracePeriodSeconds: 1
     containers: [{name: vault, image: localhost/toolbox:1, imagePullPolicy: Never, volumeMounts: [{name: v, mountPath: /v}],
       command: [sh, -c, 'test -f /v/data || head -c 1048576 /dev/urandom > /v/data; exec sleep 1000000']}]
     volumes: [{name: v, persistentVolumeClaim: {claimName: vault}}]
   EOF
   $K wait pod/vault --for=condition=Ready && $K exec vault -- sha256sum /v/data   # note the checksum
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackup
   metadata: {name: moved}
   spec: {backupSpec: {labelSelector: {matchLabels: {app: vault}}}}
   EOF
   $K get nab moved -o jsonpath='{.status.dataMoverDataUploads}' -w   # completed: 1, once Completed
   $P backup describe moved                       # Snapshot move data: true, Volume data: 1.0 MiB of 1.0 MiB (100%)
   $K delete pod vault && $K delete pvc vault     # the data is lost: the StorageClass deletes the volume
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminRestore
   metadata: {name: moved}
   spec: {restoreSpec: {backupName: moved}}
   EOF
   $K get nar moved -o jsonpath='{.status.dataMoverDataDownloads}' -w # completed: 1: a new volume, downloaded
   $K wait pod/vault --for=condition=Ready && $K exec vault -- sha256sum /v/data   # the same checksum
"
else
	running="nac is running: webhooks https://127.0.0.1:$port, metrics http://127.0.0.1:$metrics_port/metrics"
fi

cat <<TXT

==============================================================================
 $running
 policy: $POLICY, the local S3 server allowed as an endpoint (ConfigMap $NAC_NS/nac-policy; edit it live with kubectl edit)
 Velero ${VELERO_VERSION:-} in namespace ${VELERO_NAMESPACE:-openshift-adp}$( [[ -n ${VELERO_LOG:-} ]] && echo ", log $VELERO_LOG" )

 In another shell, be "$DEMO_USER", who owns namespace "$DEMO_NS" (nonadminbackup-editor-role and admin there,
 no cluster rights). The namespace runs a small shop: ConfigMaps, a Secret, a Deployment and a Service.
   export KUBECONFIG=$KUBECONFIG PATH=$(dirname "$KUBECTL"):\$PATH
   $K get configmaps,secrets,deployments,services

 1. Back up the namespace (the policy fills in TTL, storage location, volume handling: see the warnings):
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackup
   metadata: {name: first}
   spec: {backupSpec: {}}
   EOF
   $K get nab first -w                           # VELERO-PHASE: InProgress, then Completed (a few seconds)
   $K get nab first -o yaml                      # status.veleroBackup.status: progress, times, expiration

 2. Lose something:
   $K delete configmap app-config
   $K delete deployment shop

 3. Restore from the backup:
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminRestore
   metadata: {name: first-restore}
   spec: {restoreSpec: {backupName: first}}
   EOF
   $K get nar first-restore -w                   # VELERO-PHASE: Completed
   $K get configmap app-config -o yaml           # back, labelled velero.io/restore-name
   $K get deployment shop

 4. Where the backup lies:
$where

 5. Delete the backup with its data (deleteBackup: true; a plain delete keeps the data in the bucket):
   $K patch nab first --type=merge -p '{"spec":{"deleteBackup":true}}'
   $K get nab first -w                           # Deleting, then gone with the data

 6. A backup and a restore of it in one apply (GitOps style): the restore waits for its backup instead of failing:
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminBackup
   metadata: {name: second}
   spec: {backupSpec: {}}
   ---
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminRestore
   metadata: {name: second-restore, annotations: {nac.oadp.openshift.io/wait-timeout: 5m}}
   spec: {restoreSpec: {backupName: second}}
   EOF
   $K get nar second-restore -o jsonpath='{.status.conditions[?(@.type=="Queued")].message}'  # waiting, and until when
   $K get nar second-restore -w                  # Created, then Completed, once the backup is

 7. Scheduled backups: a NonAdminSchedule (the policy's minInterval applies; Velero looks at schedules once a
    minute). Each run appears as a NonAdminBackup <schedule>-<timestamp>:
   $K apply -f - <<EOF
   apiVersion: oadp.openshift.io/v1alpha1
   kind: NonAdminSchedule
   metadata: {name: hourly}
   spec: {schedule: "@every 1h", paused: false, template: {backupSpec: {}}}
   EOF
   $K get nas hourly                             # NEXT RUN: an hour after the skip the policy filled in
   $K patch nas hourly --type=merge -p '{"spec":{"skipImmediately":false,"paused":true}}'
   $K patch nas hourly --type=merge -p '{"spec":{"paused":false,"skipImmediately":false}}'  # overdue? runs at once
   $K get nab                                    # hourly-<timestamp>, restorable like any backup
   $K delete nas hourly                          # the schedule goes; its backups stay

 8. The same with the kubectl plugin, velero's verbs (\`make install-plugin\` puts it on PATH as \`kubectl nac\`):
   $P backup create fourth --exclude-resources secrets --wait   # the policy's warnings, progress, Completed
   $P backup get
   $P backup describe fourth
   $P restore create --from-backup fourth --wait
   $P schedule create nightly --schedule "0 2 * * *" && $P schedule describe nightly
   $P schedule delete nightly && $P backup delete fourth --data
$own$volumes
 Ctrl-C stops nac$( [[ $started_cluster == 1 ]] && echo ", Velero, the S3 server and the control plane" ).
==============================================================================

TXT
if [[ $RUN_NODE == 1 ]]; then
	# nac's pods' logs in the foreground until Ctrl-C.
	"$KUBECTL" -n "$NAC_NS" logs -f -l app.kubernetes.io/name=nac --prefix --max-log-requests 4 --tail 20 &
	nac_pid=$!
fi
wait "$nac_pid"
