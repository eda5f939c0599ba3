// The local node's CSI driver (hack/go-tools.sh builds it into ../../bin/csi-hostpath): the project's own code,
// a module of its own so that it pins only what it needs.
module nac.local/tools/csi-hostpath

go 1.26.0

require (
	github.com/container-storage-interface/spec v1.13.0
	golang.org/x/sys v0.45.0
	google.golang.org/grpc v1.79.3
	google.golang.org/protobuf v1.36.12-0.20260120151049-f2248ac996af
	k8s.io/kubelet v0.36.3
)

require (
	golang.org/x/net v0.55.0 // indirect
	golang.org/x/text v0.37.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260128011058-8636f8732409 // indirect
)
