// Writes the chat-template goldens of examples/hfmodel: every conversation of
// testdata/chat_conversations.jsonl rendered by @huggingface/jinja with the Qwen2.5, Qwen3 and
// Qwen2-VL templates it lists, with and without add_generation_prompt, as transformers calls
// templates (tools null when absent, the tokenizer's special tokens as variables).
//
//   cd scripts/hf-goldens && npm ci && node chat.mjs
//
// Output: examples/hfmodel/testdata/chat_golden.jsonl, one {"template", "index",
// "add_generation_prompt", "text"} a line.
import fs from "node:fs";
import path from "node:path";
import { Template } from "@huggingface/jinja";

const testdata = path.resolve(import.meta.dirname, "../../examples/hfmodel/testdata");
const read = (p) => JSON.parse(fs.readFileSync(path.join(testdata, p), "utf8"));
const templates = {
  qwen2_5: { src: read("qwen2_5/tokenizer_config.json").chat_template, config: read("qwen2_5/tokenizer_config.json") },
  qwen3: { src: read("qwen3/tokenizer_config.json").chat_template, config: read("qwen3/tokenizer_config.json") },
  qwen2_vl: { src: read("qwen2_vl/chat_template.json").chat_template, config: read("qwen2_5/tokenizer_config.json") },
};
const specialVars = (c) => {
  const v = {};
  for (const k of ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]) {
    const t = c[k];
    if (t != null) v[k] = typeof t === "string" ? t : t.content;
  }
  if (c.additional_special_tokens) v.additional_special_tokens = c.additional_special_tokens;
  return v;
};
const lines = fs.readFileSync(path.join(testdata, "chat_conversations.jsonl"), "utf8").trim().split("\n");
const out = [];
lines.forEach((line, index) => {
  const { templates: names, conversation } = JSON.parse(line);
  for (const name of names) {
    const t = templates[name];
    const tpl = new Template(t.src);
    for (const add_generation_prompt of [true, false]) {
      const text = tpl.render({ ...specialVars(t.config), tools: null, documents: null, ...conversation, add_generation_prompt });
      out.push(JSON.stringify({ template: name, index, add_generation_prompt, text }));
    }
  }
});
fs.writeFileSync(path.join(testdata, "chat_golden.jsonl"), out.join("\n") + "\n");
console.log(`${out.length} renderings -> ${path.join(testdata, "chat_golden.jsonl")}`);
