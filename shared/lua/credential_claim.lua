-- credential_claim: takes a payment credential (its replay key) for one request, atomically, so
-- that one credential buys at most one execution across every gateway.
--
-- KEYS[1] the record (hash: holder, state claimed|settling|settled, receipt)
-- ARGV[1] holder id (the request's admission id)  ARGV[2] TTL in ms (past the credential's validity)
-- Returns 1 when taken now, 0 when some request already holds or spent it.

local record = KEYS[1]
local holder, ttl = ARGV[1], ARGV[2]

if redis.call('EXISTS', record) == 1 then
  return 0
end
redis.call('HSET', record, 'holder', holder, 'state', 'claimed')
redis.call('PEXPIRE', record, ttl)
return 1
