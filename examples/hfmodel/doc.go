// Package hfmodel reads and writes Hugging Face checkpoint directories for the Qwen2/Qwen2.5 and
// Llama causal language models, and runs their tokenizer and chat template, without Python.
//
//   - Config and GenerationConfig parse config.json and generation_config.json; a key or value the
//     models here do not implement is an error naming it, never silently ignored.
//   - Open memory-maps model.safetensors (or the shards listed by model.safetensors.index.json)
//     and checks every tensor name and shape against the config; Save writes the same layout,
//     one file or K shards with their index, in float32, bfloat16 or float16.
//   - RandomCheckpoint makes a tiny model with random weights in that exact layout, so the
//     loading code is tested without downloading weights.
//   - Tokenizer implements tokenizer.json's byte-level BPE pipeline (NFC, the split
//     pre-tokenizer, added and special tokens, decoding) as Hugging Face tokenizers does.
//   - ChatTemplate renders tokenizer_config.json's chat_template (Jinja) with gonja.
//
// The model itself (forward, backward, generation, the tprl/loop policy) is examples/hflm.
package hfmodel
