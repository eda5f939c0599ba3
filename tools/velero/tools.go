//go:build tools

// Package tools records the upstream commands that make/velero.mk builds: the Velero server and the AWS
// object-store plugin it loads. It is never compiled itself; the imports keep the modules in go.mod and go.sum.
package tools

import (
	_ "github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws"
	_ "github.com/vmware-tanzu/velero/cmd/velero"
	_ "github.com/vmware-tanzu/velero/cmd/velero-restore-helper"
)
