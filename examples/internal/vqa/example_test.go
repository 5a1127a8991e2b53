package vqa_test

import (
	"fmt"
	"strings"

	"github.com/mtrl-go/mtrl/examples/internal/vqa"
)

func ExampleGenerate() {
	s := vqa.Generate(vqa.DefaultTaskConfig(), 1, 1, 1)[0]
	fmt.Println(s.Prompt)
	fmt.Println(s.Response)
	fmt.Println(s.Answer, s.Objects)
	fmt.Println(s.Image.Bounds().Size())
	// Output:
	// what colour is the square ? A red B blue C white D pink
	// <think> the square is red </think> Answer: A
	// A [{cross white bottom right} {square red top left} {triangle purple bottom left}]
	// (32,32)
}

func ExampleTokenizer() {
	tok := vqa.NewTokenizer()
	ids := tok.Encode("<think> the square is red </think> Answer: D")
	fmt.Println(tok.VocabSize(), ids)
	fmt.Println(tok.Decode(append(append([]int32{vqa.BOS}, ids...), vqa.EOS)))
	fmt.Println(tok.Decode(tok.Encode("the banana is red")))
	// Output:
	// 73 [43 60 35 57 24 44 45 7]
	// <think> the square is red </think> Answer: D
	// the <unk> is red
}

func ExampleScore() {
	w := vqa.DefaultRewardWeights() // 4:1
	for _, r := range []string{
		"<think> the square is red </think> Answer: D",
		"<think> 正方形是红色 </think> 答案：Ｄ",
		"Answer: D",
		"<think> the square is blue </think> Answer: B",
		"the square is red",
	} {
		fmt.Printf("%+v\n", vqa.Score(r, "D", w))
	}
	// Output:
	// {Overall:1 Accuracy:1 Format:1}
	// {Overall:1 Accuracy:1 Format:1}
	// {Overall:0.8 Accuracy:1 Format:0}
	// {Overall:0.2 Accuracy:0 Format:1}
	// {Overall:0 Accuracy:0 Format:0}
}

func ExampleVisualLabels() {
	tok := vqa.NewTokenizer()
	s := vqa.Generate(vqa.DefaultTaskConfig(), 1, 1, 1)[0]
	for _, resp := range []string{s.Response, "<think> the square is blue and the cross is white </think> Answer: B"} {
		ids := tok.Encode(resp)
		var seen []string
		for i, visual := range vqa.VisualLabels(s, tok, ids) {
			if visual {
				seen = append(seen, tok.Word(ids[i]))
			}
		}
		fmt.Println(strings.Join(seen, " "))
	}
	// Output:
	// red A
	// cross white
}
