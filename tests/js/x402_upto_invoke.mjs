// Our upto-priced Lucid invoke paid with the official x402 TypeScript client (@x402/fetch with
// @x402/evm's UptoEvmScheme and viem, pinned in tests/js/package.json), as its users pay a
// metered route: the client answers the 402 with a Permit2 authorization of the maximum, and
// the gateway settles, after the run, what the run reported it used.
//
// Usage: X402_PAYER_KEY=0x... node x402_upto_invoke.mjs <invoke URL> <JSON body>
//
// The key is read from the environment so that it shows in no process list, and is never
// printed. Prints one JSON line: {status, body, receipt}, where `receipt` is the decoded
// PAYMENT-RESPONSE (or null) as the client's own decoder reads it. Exits 1 with the reason when
// the client itself fails.

import { x402Client, wrapFetchWithPayment, decodePaymentResponseHeader } from "@x402/fetch";
import { UptoEvmScheme } from "@x402/evm";
import { privateKeyToAccount } from "viem/accounts";

const [url, body] = process.argv.slice(2);
const key = process.env.X402_PAYER_KEY;
if (!url || !body || !key) {
  console.error("usage: X402_PAYER_KEY=0x... node x402_upto_invoke.mjs <invoke URL> <JSON body>");
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

try {
  const client = new x402Client().register("eip155:*", new UptoEvmScheme(account));
  const fetchWithPayment = wrapFetchWithPayment(fetch, client);
  const response = await fetchWithPayment(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body,
    signal: AbortSignal.timeout(30_000),
  });
  const header = response.headers.get("payment-response");
  const receipt = header ? decodePaymentResponseHeader(header) : null;
  console.log(JSON.stringify({ status: response.status, body: await response.text(), receipt }));
} catch (error) {
  console.error(`the x402 client failed: ${error?.stack ?? error}`);
  process.exit(1);
}
