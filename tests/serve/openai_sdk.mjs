// The official OpenAI SDK for Node (scripts/install-deps.sh puts it in build-deps/npm) against
// weft serve's completions and chat completions, as a user's program calls them:
// models.retrieve, n and best_of, logprobs, echo (with the prompt's logprobs), prompts as token ids and arrays,
// logit_bias, the penalties, a stream of two choices, chat whole and streamed (ChatML) with n
// and logprobs, and errors (an unknown model, an unknown field, tools, best_of with stream).
// usage: node openai_sdk.mjs SDK_DIR BASE_URL
import { createRequire } from "node:module";
import assert from "node:assert/strict";

const [sdkDir, baseURL] = process.argv.slice(2);
const require = createRequire(`${sdkDir}/`);
const OpenAI = require("openai").default ?? require("openai");
const client = new OpenAI({ baseURL, apiKey: "unused", maxRetries: 0 });

const model = (await client.models.list()).data[0].id;
const retrieved = await client.models.retrieve(model);
assert.equal(retrieved.id, model);
await assert.rejects(client.models.retrieve("no-such-model"), (e) => e.status === 404);
console.log(`models.retrieve: ${model}; an unknown id gets 404`);

const sum = (xs) => xs.reduce((a, b) => a + b, 0);
// n: choices with their own seeds; logprobs: the tokens' texts make the text, offsets count up.
const two = await client.completions.create({ model, prompt: "The", max_tokens: 6, n: 2, logprobs: 2, seed: 7 });
assert.equal(two.choices.length, 2);
for (const [i, c] of two.choices.entries()) {
  assert.equal(c.index, i);
  assert.equal(c.logprobs.tokens.length, 6);
  assert.equal(c.logprobs.tokens.join(""), c.text);
  assert.deepEqual(c.logprobs.text_offset, c.logprobs.tokens.map((_, k) => sum(c.logprobs.tokens.slice(0, k).map((t) => t.length))));
  for (const [k, lp] of c.logprobs.token_logprobs.entries()) {
    assert.ok(lp <= 0);
    const top = Object.values(c.logprobs.top_logprobs[k]);
    assert.ok(top.length >= 1 && top.length <= 2 && lp <= Math.max(...top) + 1e-9);
  }
}
const alone = await client.completions.create({ model, prompt: "The", max_tokens: 6, seed: 7 });
assert.equal(alone.choices[0].text, two.choices[0].text);
console.log(`n 2, logprobs 2: ${JSON.stringify(two.choices.map((c) => c.text))}; the first is the request's own seed's`);

// best_of 3: the most likely of the three sequences n 3 gives with the same seed.
const three = await client.completions.create({ model, prompt: "The", max_tokens: 6, n: 3, logprobs: 0, seed: 9 });
const best = await client.completions.create({ model, prompt: "The", max_tokens: 6, best_of: 3, seed: 9 });
const likeliest = three.choices.reduce((a, b) => (sum(b.logprobs.token_logprobs) > sum(a.logprobs.token_logprobs) ? b : a));
assert.equal(best.choices.length, 1);
assert.equal(best.choices[0].text, likeliest.text);
assert.equal(best.usage.completion_tokens, 18);
console.log(`best_of 3: ${JSON.stringify(best.choices[0].text)}, the likeliest of ${JSON.stringify(three.choices.map((c) => c.text))}`);

// echo, and prompts as token ids and as arrays.
const echoed = await client.completions.create({ model, prompt: "The cat", max_tokens: 3, temperature: 0, echo: true });
const plain = await client.completions.create({ model, prompt: "The cat", max_tokens: 3, temperature: 0 });
assert.equal(echoed.choices[0].text, "The cat" + plain.choices[0].text);
const many = await client.completions.create({ model, prompt: ["The cat", "A dog"], max_tokens: 3, temperature: 0 });
assert.deepEqual(many.choices.map((c) => c.index), [0, 1]);
assert.equal(many.choices[0].text, plain.choices[0].text);
const ids = await client.completions.create({ model, prompt: [20, 21, 22], max_tokens: 3, temperature: 0 });
assert.equal(ids.usage.prompt_tokens, 3);
await assert.rejects(client.completions.create({ model, prompt: [1, 100000], max_tokens: 1 }), (e) => e.status === 400);
console.log(`echo, two prompts, token ids: ${JSON.stringify(many.choices.map((c) => c.text))}`);

// echo with logprobs: the prompt's tokens scored (the first has none), each as the same model
// scores that token when it is generated after the same prefix (forced by logit_bias).
const scored = await client.completions.create({ model, prompt: [40, 41, 42, 43], max_tokens: 0, echo: true, logprobs: 1 });
const lp = scored.choices[0].logprobs;
assert.equal(lp.tokens.length, 4);
assert.equal(lp.token_logprobs[0], null);
assert.equal(lp.tokens.join(""), scored.choices[0].text);
const forced = await client.completions.create({ model, prompt: [40, 41, 42], max_tokens: 1, logprobs: 1,
                                                 logit_bias: { 43: 100 } });
assert.ok(Math.abs(forced.choices[0].logprobs.token_logprobs[0] - lp.token_logprobs[3]) < 1e-5,
          `${forced.choices[0].logprobs.token_logprobs[0]} vs ${lp.token_logprobs[3]}`);
console.log(`echo with logprobs: the prompt's tokens ${JSON.stringify(lp.token_logprobs.map((x) => x && x.toFixed(4)))}; ` +
            "the last equals that token's when generated");

// logit_bias: +100 on one token makes it every choice; the frequency penalty stops greedy repeats.
const token = 40;
const biased = await client.completions.create({ model, prompt: "The", max_tokens: 5, temperature: 0, logprobs: 0,
                                                 logit_bias: { [token]: 100 } });
assert.equal(new Set(biased.choices[0].logprobs.tokens).size, 1);
const greedy = await client.completions.create({ model, prompt: "The", max_tokens: 12, temperature: 0, logprobs: 0 });
const penalized = await client.completions.create({ model, prompt: "The", max_tokens: 12, temperature: 0, logprobs: 0,
                                                    frequency_penalty: 2 });
assert.ok(new Set(greedy.choices[0].logprobs.tokens).size < 12, "the greedy text repeats itself");
assert.equal(new Set(penalized.choices[0].logprobs.tokens).size, 12);
console.log(`logit_bias: ${JSON.stringify(biased.choices[0].text)}; frequency_penalty 2: ${JSON.stringify(penalized.choices[0].text)} ` +
            `(greedy: ${JSON.stringify(greedy.choices[0].text)})`);

// A stream of two choices, with logprobs: each choice's pieces make the whole request's text.
const texts = ["", ""], finished = [null, null];
let lpTokens = 0;
for await (const chunk of await client.completions.create({ model, prompt: "The", max_tokens: 6, n: 2, logprobs: 1,
                                                             seed: 7, stream: true })) {
  for (const c of chunk.choices) {
    texts[c.index] += c.text;
    if (c.finish_reason) finished[c.index] = c.finish_reason;
    lpTokens += c.logprobs ? c.logprobs.tokens.length : 0;
  }
}
assert.deepEqual(texts, two.choices.map((c) => c.text));
assert.deepEqual(finished, ["length", "length"]);
assert.equal(lpTokens, 12);
console.log("a stream of 2 choices with logprobs: the same texts as the whole answer");

// Chat (ChatML: the template of a model without one of its own), whole and streamed alike,
// with n and logprobs.
const messages = [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi" }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0, n: 2,
                                                    logprobs: true, top_logprobs: 2 });
assert.equal(chat.object, "chat.completion");
assert.equal(chat.choices.length, 2);
for (const c of chat.choices) {
  assert.equal(c.message.role, "assistant");
  assert.equal(c.message.content, chat.choices[0].message.content);  // greedy: the same text
  assert.ok(c.logprobs.content.length >= 1 && c.logprobs.content.length <= 6);
  for (const t of c.logprobs.content) {
    assert.ok(t.logprob <= 0 && Array.isArray(t.bytes) && t.top_logprobs.length === 2);
    assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
  }
}
let streamed = "", role = null;
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 6, temperature: 0,
                                                                  stream: true })) {
  role ??= chunk.choices[0]?.delta?.role ?? null;
  streamed += chunk.choices[0]?.delta?.content ?? "";
}
assert.equal(role, "assistant");
assert.equal(streamed, chat.choices[0].message.content);
await assert.rejects(client.chat.completions.create({ model, messages, tools: [{ type: "function", function: { name: "f" } }] }),
                     (e) => e.status === 400 && /tools/.test(e.message));
console.log(`chat (ChatML), n 2, logprobs: ${JSON.stringify(chat.choices[0].message.content)}, the same streamed; tools: 400`);

// An unknown field is refused, not ignored.
await assert.rejects(client.completions.create({ model, prompt: "The", max_tokens: 1, temprature: 0 }),
                     (e) => e.status === 400 && /Unrecognized request argument supplied: temprature/.test(e.message));
await assert.rejects(client.completions.create({ model, prompt: "The", max_tokens: 1, best_of: 2, stream: true }),
                     (e) => e.status === 400);
console.log("an unknown field ('temprature') and best_of with stream: 400");
console.log("openai sdk: every check passed");
