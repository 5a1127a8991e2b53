// Package vqa is the generated visual question-answering task of the example
// trainer (examples/trainer): scenes, questions, a fixed word-level tokenizer,
// labels of the image-dependent ("visual") tokens, rewards, and dataset files.
//
// # Task
//
// Each sample is an ImageSize x ImageSize RGB image (default 32) on a plain
// black background holding 1..MaxShapes shapes (circle, square, triangle,
// cross, diamond) with distinct shapes, distinct colours (red, green, blue,
// yellow, purple, orange, white, cyan, pink, brown) and distinct cells of a
// 2x2 grid (top left, top right, bottom left, bottom right). A question asks
// the colour of a shape, the shape of a colour, the number of shapes, or the
// position of a shape or of a colour, followed by Options lettered options
// (A..J) with the correct one at a random letter:
//
//	prompt:   what colour is the square ? A pink B blue C white D red
//	response: <think> the square is red </think> Answer: D
//
// With TaskConfig.Chain = ReasoningChain the reference wraps the same fact in about thirty
// image-independent tokens phrased one of several ways (an opening remark, the question
// restated, the fact, a conclusion naming the value and its letter), so that most of a response's
// tokens, and most of its sampling entropy, have no bearing on the answer.
//
// No question can be answered from the prompt alone: every option is a value
// the image could have. Question kinds whose value set is smaller than
// Options (shapes: 5, positions: 4) are not asked. Generation is deterministic:
// sample id depends only on (TaskConfig, seed, id) through a math/rand/v2 PCG
// stream seeded with (seed, id).
//
// # Tokens
//
// Tokenizer is a fixed vocabulary of 73 words (ids 0..72): PAD, BOS, EOS,
// UNK, the letters A..J, the number words zero..nine, colours, shapes, side
// words and the function words of prompts and chains ("<think>", "</think>",
// "Answer:", "?", ...). Encode splits on white space and adds no BOS/EOS; the
// trainer feeds BOS + prompt + response + EOS.
//
// # Place in a VPPO step
//
// The trainer generates or Loads samples, encodes prompts, samples n
// responses per prompt, decodes them and calls Score for the rewards
// (accuracy of the chosen letter and think-format, weighted 4:1 by default).
// VisualLabels marks, for each response token [B, T], whether it is a
// visual token; the trainer compares the perception mask (top-p tokens by
// image dependency) with these labels to report precision and recall.
//
// # Files
//
// WriteJSONL and WriteParquet write a split; Load reads either by extension.
// See those functions for the columns.
package vqa
