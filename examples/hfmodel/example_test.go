package hfmodel_test

import (
	"fmt"

	"github.com/mtrl-go/mtrl/examples/hfmodel"
)

// Encode and decode with the real Qwen2.5 tokenizer (testdata holds it gzipped).
func ExampleTokenizer() {
	tok, err := hfmodel.LoadTokenizer("testdata/qwen2_5")
	if err != nil {
		panic(err)
	}
	ids := tok.Encode("<|im_start|>user\n你好, world!<|im_end|>")
	text, _ := tok.Decode(ids, true)
	fmt.Println(ids)
	fmt.Printf("%q\n", text)
	// Output:
	// [151644 872 198 108386 11 1879 0 151645]
	// "user\n你好, world!"
}

// Render Qwen2.5's chat template with the assistant turn opened.
func ExampleChatTemplate() {
	ct, err := hfmodel.LoadChatTemplate("testdata/qwen2_5")
	if err != nil {
		panic(err)
	}
	prompt, err := ct.Render([]byte(`{"messages": [{"role": "user", "content": "2+2?"}]}`), true)
	if err != nil {
		panic(err)
	}
	fmt.Print(prompt)
	// Output:
	// <|im_start|>system
	// You are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>
	// <|im_start|>user
	// 2+2?<|im_end|>
	// <|im_start|>assistant
}
