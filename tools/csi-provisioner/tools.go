//go:build tools

// Package tools records the external provisioner that hack/go-tools.sh builds. It is never compiled itself.
package tools

import _ "github.com/kubernetes-csi/external-provisioner/v6/cmd/csi-provisioner"
