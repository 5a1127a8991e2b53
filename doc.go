// Package mtrl is a Go SDK for token-level multimodal policy optimization (see README.md).
package mtrl
