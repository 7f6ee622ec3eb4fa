-- credential_claim: takes a payment credential (its replay key) for one request, atomically, so
-- that one credential buys at most one execution across every gateway.
--
-- KEYS[1] the record (hash: holder, state claimed|settling|settled, receipt)
-- ARGV[1] holder id (the request's admission id)  ARGV[2] TTL in ms (past the credential's validity)
-- Returns '' when taken now, else the state of the request that already holds or spent it.

local record = KEYS[1]
local holder, ttl = ARGV[1], ARGV[2]

local state = redis.call('HGET', record, 'state')
if state then
  return state
end
redis.call('HSET', record, 'holder', holder, 'state', 'claimed')
redis.call('PEXPIRE', record, ttl)
return ''
