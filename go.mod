module github.com/mtrl-go/mtrl

go 1.26
