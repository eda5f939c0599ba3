//go:build tools

// Package tools records the S3 server that make/velero.mk builds. It is never compiled itself.
package tools

import _ "github.com/versity/versitygw/cmd/versitygw"
