module github.com/mtrl-go/mtrl

go 1.26

require (
	github.com/davecgh/go-spew v1.1.1 // indirect
	github.com/pmezard/go-difflib v1.0.0 // indirect
	github.com/stretchr/testify v1.10.0 // indirect
	golang.org/x/sync v0.12.0 // indirect
	golang.org/x/sys v0.30.0
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
