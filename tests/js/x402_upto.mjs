// The official x402 `upto` scheme (@x402/evm 2.27.0, @x402/core, viem; pinned in
// tests/js/package.json), on both sides, for the Rust cross-checks in facilitator/tests/upto_official.rs.
//
//   X402_PAYER_KEY=0x... node x402_upto.mjs pay < payment-required.json
//     The client: `x402Client` with `UptoEvmScheme(privateKeyToAccount(key))` answers the
//     PAYMENT-REQUIRED document on stdin. Prints {"header": <PAYMENT-SIGNATURE value>,
//     "payload": <the payment payload>}.
//
//   node x402_upto.mjs facilitate < {"paymentPayload", "paymentRequirements", "facilitator",
//                                    "settleAmounts": ["0", "1234", ...]}
//     The facilitator: `UptoEvmScheme` (upto/facilitator) over a stub signer with no chain
//     behind it: its address is "facilitator", every contract has code but the payer (an EOA,
//     so the signature is checked by ECDSA recovery), simulations succeed, and a settlement
//     "transaction" succeeds, recording the amount the proxy was asked to move. Verifies the
//     payload against the requirements (the maximum), then settles it once per amount, in
//     order, with the requirements' amount set to it. Prints {"verify": <VerifyResponse>,
//     "settles": [{"response": <SettleResponse>, "written": <amount sent to the proxy or null>}]}.
//     An array of such inputs is answered with an array, each on a fresh facilitator.
//
// The key comes from the environment so that it shows in no process list; it is never printed.
// Exits 1 with the reason when the library itself throws.

import { x402Client } from "@x402/core/client";
import { encodePaymentSignatureHeader } from "@x402/core/http";
import { UptoEvmScheme as UptoClient } from "@x402/evm/upto/client";
import { UptoEvmScheme as UptoFacilitator } from "@x402/evm/upto/facilitator";
import { getAddress } from "viem";
import { privateKeyToAccount } from "viem/accounts";

async function stdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

async function pay() {
  const key = process.env.X402_PAYER_KEY;
  let account;
  try {
    account = privateKeyToAccount(key);
  } catch {
    // Whatever viem says may quote the key: say only that it is unusable.
    console.error("X402_PAYER_KEY is not a usable private key");
    process.exit(2);
  }
  const paymentRequired = await stdin();
  const client = new x402Client().register("eip155:*", new UptoClient(account));
  const payload = await client.createPaymentPayload(paymentRequired);
  return { header: encodePaymentSignatureHeader(payload), payload };
}

/** A facilitator signer with no chain: see the header. */
function stubSigner(facilitator, payer) {
  const written = [];
  const signer = {
    getAddresses: () => [getAddress(facilitator)],
    getCode: async ({ address }) =>
      getAddress(address) === getAddress(payer) ? "0x" : "0x6080604052",
    readContract: async () => undefined,
    writeContract: async ({ args }) => {
      // settle(permit, amount, owner, witness, signature)
      written.push(args[1].toString());
      return `0x${"ab".repeat(32)}`;
    },
    waitForTransactionReceipt: async () => ({ status: "success" }),
  };
  return { signer, written };
}

async function facilitate() {
  const input = await stdin();
  if (Array.isArray(input)) {
    const answers = [];
    for (const one of input) answers.push(await facilitateOne(one));
    return answers;
  }
  return facilitateOne(input);
}

async function facilitateOne(input) {
  const payer = input.paymentPayload.payload.permit2Authorization.from;
  const { signer, written } = stubSigner(input.facilitator, payer);
  const scheme = new UptoFacilitator(signer);
  const verify = await scheme.verify(input.paymentPayload, input.paymentRequirements);
  const settles = [];
  for (const amount of input.settleAmounts ?? []) {
    const before = written.length;
    const response = await scheme.settle(input.paymentPayload, {
      ...input.paymentRequirements,
      amount,
    });
    settles.push({ response, written: written.length > before ? written.at(-1) : null });
  }
  return { verify, settles };
}

const modes = { pay, facilitate };
const mode = modes[process.argv[2]];
if (!mode) {
  console.error("usage: node x402_upto.mjs pay|facilitate < input.json");
  process.exit(2);
}
try {
  console.log(JSON.stringify(await mode()));
} catch (error) {
  console.error(`x402 upto ${process.argv[2]} failed: ${error?.message ?? error}`);
  process.exit(1);
}
