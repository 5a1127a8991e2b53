module github.com/mtrl-go/mtrl

go 1.26

require (
	github.com/stretchr/testify v1.10.0 // indirect
	golang.org/x/sync v0.12.0 // indirect
)
