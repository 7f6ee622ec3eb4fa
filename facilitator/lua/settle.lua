-- settle: spends one authorization (an EIP-3009 nonce for exact, a Permit2 nonce for upto),
-- atomically: the nonce is checked and marked spent, the payer debited and the payee credited,
-- or nothing happens at all. Every key shares the namespace's hash tag, so the script runs on
-- one slot of a cluster as well.
--
-- KEYS[1] the spent-nonce marker (hash: `transaction` the settlement's transaction hash,
--         `amount` what it settled, so that a lookup of an upto permit can say how much)
-- KEYS[2] the payer's balance (string: atomic units, decimal)
-- KEYS[3] the payee's balance (may be KEYS[2]: paying oneself moves nothing but the nonce)
-- ARGV[1] amount, atomic units, a canonical decimal that fits a signed 64-bit integer
-- ARGV[2] the transaction hash to record
-- ARGV[3] headroom: the largest payee balance that can still take the amount (2^63-1 - amount)
-- Returns 1 when settled now, 0 when the nonce was spent before, -1 when the payer's balance is
-- below the amount, -2 when the payee's balance would overflow (nothing changes in either case;
-- the nonce stays unspent).

local spent, payer, payee = KEYS[1], KEYS[2], KEYS[3]
local amount, transaction, headroom = ARGV[1], ARGV[2], ARGV[3]

-- Compares canonical non-negative decimals as strings: Lua numbers are doubles and would round
-- balances above 2^53.
local function less(a, b)
  if #a ~= #b then
    return #a < #b
  end
  return a < b
end

if redis.call('EXISTS', spent) == 1 then
  return 0
end
local balance = redis.call('GET', payer) or '0'
if less(balance, amount) then
  return -1
end
-- Checked before any write: a script that fails halfway keeps its earlier writes.
if payee ~= payer and less(headroom, redis.call('GET', payee) or '0') then
  return -2
end
redis.call('HSET', spent, 'transaction', transaction, 'amount', amount)
redis.call('DECRBY', payer, amount)
redis.call('INCRBY', payee, amount)
return 1
