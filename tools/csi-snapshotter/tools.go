//go:build tools

// Package tools records the snapshot controller and the csi-snapshotter sidecar that hack/go-tools.sh builds, and
// the client module whose config/crd holds the VolumeSnapshot CRDs. It is never compiled itself.
package tools

import (
	_ "github.com/kubernetes-csi/external-snapshotter/client/v8/apis/volumesnapshot/v1"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/csi-snapshotter"
	_ "github.com/kubernetes-csi/external-snapshotter/v8/cmd/snapshot-controller"
)
