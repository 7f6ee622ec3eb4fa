// Our paid Lucid invoke paid with the official x402 TypeScript client (@x402/fetch,
// @x402/evm, @x402/extensions and viem, pinned in tests/js/package.json), using the
// payment-identifier extension as its documentation shows: an `onBeforePaymentCreation` hook
// appends the id with `appendPaymentIdentifierToExtensions` to the extensions the 402 declared.
//
// Usage: X402_PAYER_KEY=0x... node x402_payment_identifier.mjs <invoke URL> <payment id>
//
// The key is read from the environment so that it shows in no process list, and is never
// printed. Three POSTs of the same JSON body, each through `wrapFetchWithPayment`, which
// answers every 402 with a fresh credential (a new EIP-3009 nonce):
//   1. with <payment id>;
//   2. with <payment id> again: a client's retry of the same logical request;
//   3. with another id (`generatePaymentId()`): another logical request.
// Prints one JSON line: {"calls": [{id, declared, status, replayed, body}, ...]}, where
// `declared` says whether the 402 the client answered declared the extension (the hook only
// appends an id when it did) and `replayed` is the `Idempotency-Replayed` header, or null.
// The caller judges the answers. Exits 1 with the reason when the client itself fails.

import { x402Client, wrapFetchWithPayment } from "@x402/fetch";
import { ExactEvmScheme } from "@x402/evm";
import {
  PAYMENT_IDENTIFIER,
  appendPaymentIdentifierToExtensions,
  generatePaymentId,
} from "@x402/extensions/payment-identifier";
import { privateKeyToAccount } from "viem/accounts";

const [url, id] = process.argv.slice(2);
const key = process.env.X402_PAYER_KEY;
if (!url || !id || !key) {
  console.error("usage: X402_PAYER_KEY=0x... node x402_payment_identifier.mjs <invoke URL> <payment id>");
  process.exit(2);
}

let account;
try {
  account = privateKeyToAccount(key);
} catch {
  // Whatever viem says may quote the key: say only that it is unusable.
  console.error("X402_PAYER_KEY is not a usable private key");
  process.exit(2);
}
const body = JSON.stringify({ input: { text: "paid with the official x402 client" } });

// One client per logical request, as the x402 payment-identifier example builds it: its hook
// adds this request's id to whatever 402 the client answers.
async function pay(paymentId) {
  let declared = false;
  const client = new x402Client().register("eip155:*", new ExactEvmScheme(account));
  client.onBeforePaymentCreation(async ({ paymentRequired }) => {
    declared = Boolean(paymentRequired.extensions?.[PAYMENT_IDENTIFIER]);
    paymentRequired.extensions ??= {};
    appendPaymentIdentifierToExtensions(paymentRequired.extensions, paymentId);
  });
  const fetchWithPayment = wrapFetchWithPayment(fetch, client);
  const response = await fetchWithPayment(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
    signal: AbortSignal.timeout(30_000),
  });
  return {
    id: paymentId,
    declared,
    status: response.status,
    replayed: response.headers.get("idempotency-replayed"),
    body: await response.text(),
  };
}

try {
  const calls = [];
  for (const paymentId of [id, id, generatePaymentId()]) {
    calls.push(await pay(paymentId));
  }
  console.log(JSON.stringify({ calls }));
} catch (error) {
  console.error(`the x402 client failed: ${error?.stack ?? error}`);
  process.exit(1);
}
