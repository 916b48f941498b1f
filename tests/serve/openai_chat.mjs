// The official OpenAI SDK for Node (scripts/install-deps.sh puts it in build-deps/npm) against
// weft serve's chat completions, as a user's program calls it: one answer whole, one streamed.
// usage: node openai_chat.mjs SDK_DIR BASE_URL MESSAGES_JSON MAX_TOKENS
// Prints JSON: {"whole": text, "finish_reason", "streamed": text, "chunks": count, "model"}.
import { createRequire } from "node:module";
import { readFileSync } from "node:fs";

const [sdkDir, baseURL, messagesFile, maxTokens] = process.argv.slice(2);
const require = createRequire(`${sdkDir}/`);
const OpenAI = require("openai").default ?? require("openai");
const client = new OpenAI({ baseURL, apiKey: "unused" });
const messages = JSON.parse(readFileSync(messagesFile, "utf8"));
const request = { model: undefined, messages, max_tokens: Number(maxTokens), temperature: 0 };

const models = await client.models.list();
request.model = models.data[0].id;
const whole = await client.chat.completions.create(request);
let streamed = "", chunks = 0;
for await (const chunk of await client.chat.completions.create({ ...request, stream: true })) {
  chunks += 1;
  streamed += chunk.choices[0]?.delta?.content ?? "";
}
console.log(JSON.stringify({ whole: whole.choices[0].message.content, finish_reason: whole.choices[0].finish_reason,
                             streamed, chunks, model: whole.model }));
