// Writes the tokenizer goldens of examples/hfmodel: a generated corpus of a few thousand strings
// (CJK without spaces, emoji, digits, whitespace runs, special tokens, NFC cases, code, random
// mixes) encoded and decoded by two references that must agree: @huggingface/tokenizers (the
// JavaScript port) and @anush008/tokenizers (the Rust tokenizers library through napi). Also
// random id sequences decoded with and without special tokens.
//
//   cd scripts/hf-goldens && npm ci && node tokenizer.mjs
//
// Output: examples/hfmodel/testdata/<name>/tokenizer_golden.jsonl.gz, one JSON object a line:
// {"text", "ids", "decoded"} or {"decode": ids, "text", "text_skip_special"}.
import fs from "node:fs";
import zlib from "node:zlib";
import path from "node:path";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";

const require = createRequire(import.meta.url);
const rust = require("@anush008/tokenizers");
const testdata = path.resolve(import.meta.dirname, "../../examples/hfmodel/testdata");

// mulberry32: a small seeded generator, so the corpus is the same on every run.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6d2b79f5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function corpus(specials) {
  const r = rng(20260522);
  const int = (n) => Math.floor(r() * n);
  const pick = (a) => a[int(a.length)];
  const range = (lo, hi) => String.fromCodePoint(lo + int(hi - lo + 1));
  const rep = (n, f) => Array.from({ length: n }, f).join("");
  const words = ["the", "The", "THE", "cat", "isn't", "don't", "I'm", "I'M", "we'll", "they're", "THEY'RE",
    "you've", "he'd", "it's", "It'S", "o'clock", "rock'n'roll", "hello", "world", "Qwen", "model", "token",
    "naïve", "café", "résumé", "straße", "Ελληνικά", "русский", "עברית", "العربية", "हिन्दी", "ไทย",
    "'ſ", "'ſa", "x'S", "don'T", "'re", "'LL", "can’t"];
  const punct = [".", ",", "!", "?", ";", ":", "...", "—", "-", "(", ")", "[", "]", "{", "}", "\"", "'", "`",
    "«", "»", "“", "”", "#", "$", "%", "&", "*", "+", "=", "/", "\\", "|", "<", ">", "@", "^", "_", "~"];
  const spaces = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n ", "\u00a0", "\u3000", "\u2028",
    "\u0085", "\u200b", "\ufeff", "\u2003", " \t\n", "\n   ", "    "];
  const emoji = ["😀", "👍", "👍🏽", "👨‍👩‍👧‍👦", "🇨🇳", "🇺🇸", "1️⃣", "❤️", "🏳️‍🌈", "🤖", "🧑🏿‍💻", "✨", "☕", "🀄"];
  const cjk = () => rep(1 + int(24), () => {
    const k = int(10);
    if (k < 5) return range(0x4e00, 0x9fa5);
    if (k < 6) return range(0x3041, 0x3096);
    if (k < 7) return range(0x30a1, 0x30fa);
    if (k < 8) return range(0xac00, 0xd7a3);
    if (k < 9) return pick(["，", "。", "！", "？", "、", "「", "」", "：", "（", "）"]);
    return pick(["的", "是", "不", "了", "人", "我", "在", "有", "他", "这"]);
  });
  const digits = () => pick([
    () => rep(1 + int(12), () => range(0x30, 0x39)),
    () => `${int(100000)}.${int(1000)}`,
    () => `${int(1000)},${int(1000)},${int(1000)}`,
    () => rep(1 + int(5), () => range(0xff10, 0xff19)),
    () => rep(1 + int(5), () => range(0x660, 0x669)),
    () => pick(["²", "³", "½", "Ⅻ", "①", "٣", "१२३", "𝟙𝟚"]),
    () => `x${int(10)}y${int(100)}z${int(1000)}`,
  ])();
  const special = () => pick(specials);
  const nfc = () => pick(["e\u0301", "A\u030a", "\u212b", "\u2126", "\u1100\u1161\u11a8", "o\u0308\u0301",
    "\u0041\u0327\u0301", "ﬁ", "①", "Ａ", "ｶ", "\u00c5", "n\u0303", "\u0915\u093c"]);
  const code = () => pick([
    "func main() {\n\tfmt.Println(\"hi\")\n}\n",
    "def f(x):\n    return x ** 2  # square\n",
    "if (a[i] != b[j]) { return -1; }",
    "    for i in range(10):\n        print(i)\n\n",
    "SELECT * FROM t WHERE id = 42;",
    "<div class=\"x\">&nbsp;</div>",
    "$$\\frac{1}{2} + \\sqrt{x^2+y^2} = \\boxed{42}$$",
    "\\begin{align} a &= b \\\\ c &= d \\end{align}",
  ]);
  const anyChar = () => {
    const k = int(12);
    if (k < 2) return range(0x20, 0x7e);
    if (k < 3) return range(0xa0, 0x24f);
    if (k < 4) return range(0x370, 0x3ff);
    if (k < 5) return range(0x400, 0x4ff);
    if (k < 6) return range(0x4e00, 0x9fa5);
    if (k < 7) return pick(emoji);
    if (k < 8) return pick(spaces);
    if (k < 9) return pick(punct);
    if (k < 10) return range(0x2000, 0x206f);
    if (k < 11) return range(0x1f300, 0x1f5ff);
    return range(0x0, 0x1f); // control characters
  };
  const sentence = () => rep(1 + int(14), () => pick(words) + (int(3) ? " " : pick(punct)));
  const gens = [
    ["english", sentence],
    ["cjk", cjk],
    ["cjk-mixed", () => cjk() + pick(words) + cjk() + digits() + cjk()],
    ["emoji", () => rep(1 + int(8), () => pick(emoji) + (int(2) ? "" : pick(words)))],
    ["digits", () => rep(1 + int(6), () => digits() + pick(["", " ", ",", ".", "-", "x"]))],
    ["whitespace", () => rep(1 + int(10), () => pick(spaces) + (int(2) ? pick(words) : ""))],
    ["special", () => rep(1 + int(6), () => pick([special, sentence, cjk, () => pick(spaces), () => "<|", () => "|>", () => "<", () => special().toUpperCase(), () => special().slice(0, -1)])())],
    ["nfc", () => rep(1 + int(6), () => nfc() + (int(2) ? pick(words) : ""))],
    ["code", () => code() + (int(2) ? code() : "")],
    ["random", () => rep(1 + int(60), anyChar)],
  ];
  const out = ["", " ", "\n", "a", "<|im_start|>", "<|im_start|><|im_end|>", "  \n\n\t ", "'s", "'S", "'ſ",
    "Hello, world!", "你好世界", "123456789", "😀😀😀", "a".repeat(300), "你".repeat(300), " ".repeat(50)];
  for (const [, g] of gens) for (let i = 0; i < 300; i++) out.push(g());
  return out;
}

async function main() {
  for (const name of ["qwen2_5", "qwen3"]) {
    const dir = path.join(testdata, name);
    const json = zlib.gunzipSync(fs.readFileSync(path.join(dir, "tokenizer.json.gz"))).toString("utf8");
    const config = JSON.parse(fs.readFileSync(path.join(dir, "tokenizer_config.json"), "utf8"));
    const tmp = path.join(fs.mkdtempSync("/tmp/hf-goldens-"), "tokenizer.json");
    fs.writeFileSync(tmp, json);
    const js = new Tokenizer(JSON.parse(json), config);
    const rs = rust.Tokenizer.fromFile(tmp);
    const specials = JSON.parse(json).added_tokens.map((a) => a.content);
    const lines = [];
    let disagree = 0;
    const texts = corpus(specials);
    for (const text of texts) {
      const a = js.encode(text).ids;
      const ids = Array.from((await rs.encode(text)).getIds(), Number);
      const decoded = ids.length ? js.decode(ids) : "";
      const decodedRust = await rs.decode(ids, false);
      if (JSON.stringify(a) !== JSON.stringify(ids) || decoded !== decodedRust) {
        disagree++;
        console.error(`${name}: the references disagree on ${JSON.stringify(text)}: js ${JSON.stringify(a)} rust ${JSON.stringify(ids)}; decoded js ${JSON.stringify(decoded)} rust ${JSON.stringify(decodedRust)}`);
        continue;
      }
      lines.push(JSON.stringify({ text, ids, decoded }));
    }
    const r = rng(7);
    for (let i = 0; i < 500; i++) {
      const ids = Array.from({ length: 1 + Math.floor(r() * 12) }, () =>
        r() < 0.15 ? 151643 + Math.floor(r() * specials.length) : Math.floor(r() * 151643));
      const text = js.decode(ids), skip = js.decode(ids, { skip_special_tokens: true });
      if (text !== await rs.decode(ids, false) || skip !== await rs.decode(ids, true)) {
        disagree++;
        console.error(`${name}: the references decode ${JSON.stringify(ids)} differently`);
        continue;
      }
      lines.push(JSON.stringify({ decode: ids, text, text_skip_special: skip }));
    }
    const file = path.join(dir, "tokenizer_golden.jsonl.gz");
    fs.writeFileSync(file, zlib.gzipSync(lines.join("\n") + "\n", { level: 9 }));
    console.log(`${name}: ${texts.length} strings (${disagree} where the references disagree, left out), 500 decodes -> ${file}`);
  }
}

await main();
