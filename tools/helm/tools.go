//go:build tools

// Package tools records the helm CLI that make/cluster.mk builds into bin/helm.
package tools

import _ "helm.sh/helm/v3/cmd/helm"
