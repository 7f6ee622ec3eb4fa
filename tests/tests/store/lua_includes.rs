//! The store scripts' shared Lua helpers (`shared/store/lua/includes/`), run on a real
//! redis-server with the text the build pastes into every script that includes them.

use harness::TestResult;
use harness::redis_server::RedisServer;

/// `num_str.lua`, as `build.rs` pastes it.
const NUM_STR: &str = include_str!("../../../shared/store/lua/includes/num_str.lua");

/// What `num_str` makes of each of `numbers` (Lua expressions), and what Redis stores for the
/// same number passed as it is (`HSET` of a Lua number), in one script call.
async fn num_str_and_redis(
    connection: &mut redis::aio::MultiplexedConnection,
    numbers: &[&str],
) -> TestResult<Vec<(String, String)>> {
    let list = numbers.join(", ");
    let body = format!(
        "{NUM_STR}\nlocal out = {{}}\n\
         for i, n in ipairs({{{list}}}) do\n\
           redis.call('HSET', KEYS[1], 'n', n)\n\
           out[#out + 1] = num_str(n)\n\
           out[#out + 1] = redis.call('HGET', KEYS[1], 'n')\n\
         end\n\
         return out"
    );
    let flat: Vec<String> = redis::cmd("EVAL")
        .arg(body)
        .arg(1)
        .arg("num-str-probe")
        .query_async(connection)
        .await?;
    Ok(flat
        .chunks(2)
        .map(|pair| (pair[0].clone(), pair[1].clone()))
        .collect())
}

#[tokio::test]
async fn num_str_writes_integers_as_redis_would() -> TestResult {
    let server = RedisServer::start()?;
    let mut connection = server.client().await?;
    let numbers = [
        "0",
        "1",
        "-5",
        "1765000000000",
        "1765000000000 + 3600000",
        "2^53",
        "-(2^53)",
    ];
    let pairs = num_str_and_redis(&mut connection, &numbers).await?;
    let expected = [
        "0",
        "1",
        "-5",
        "1765000000000",
        "1765003600000",
        "9007199254740992",
        "-9007199254740992",
    ];
    assert_eq!(pairs.len(), expected.len());
    for ((made, stored), want) in pairs.iter().zip(expected) {
        assert_eq!(made, want);
        assert_eq!(made, stored, "num_str and Redis disagree on {want}");
    }
    Ok(())
}

#[tokio::test]
async fn num_str_keeps_a_fraction_as_redis_would() -> TestResult {
    let server = RedisServer::start()?;
    let mut connection = server.client().await?;
    // "%d" alone would write 1, -2, 0 and 1765000000000.
    let numbers = ["1.5", "-2.25", "0.1", "1765000000000.5"];
    let pairs = num_str_and_redis(&mut connection, &numbers).await?;
    assert_eq!(pairs.len(), numbers.len());
    for ((made, stored), source) in pairs.iter().zip(numbers) {
        assert_eq!(made, stored, "num_str and Redis disagree on {source}");
        let value: f64 = made.parse()?;
        let source: f64 = source.parse()?;
        assert_eq!(value, source, "num_str({source}) lost its fraction: {made}");
    }
    Ok(())
}

/// `lease_field.lua`, as `build.rs` pastes it.
const LEASE_FIELD: &str = include_str!("../../../shared/store/lua/includes/lease_field.lua");

/// The lease field round-trips through `lease_pack`, `lease_unpack`, `lease_renewed` and
/// `lease_dropped` on a real Redis, active, prepared (no run yet) and without a lease, the
/// epoch kept throughout; an absent or unreadable field is no lease. (The store's Rust reader
/// of the same text, `replies::lease`, has its unit tests beside it.)
#[tokio::test]
async fn the_lease_field_round_trips_and_keeps_its_epoch() -> TestResult {
    let server = RedisServer::start()?;
    let mut connection = server.client().await?;
    let body = format!(
        "{LEASE_FIELD}\n\
         local out = {{}}\n\
         for _, run in ipairs({{{{'1765000900000', '900000'}}, {{'', ''}}}}) do\n\
           redis.call('HSET', KEYS[1], 'ls', lease_pack('1765000000000', run[1], run[2], '12'))\n\
           local stored = redis.call('HGET', KEYS[1], 'ls')\n\
           local expires, run_deadline, run_ms, epoch = lease_unpack(stored)\n\
           out[#out + 1] = stored\n\
           out[#out + 1] = tostring(expires) .. '|' .. run_deadline .. '/' .. run_ms .. '|' .. epoch\n\
           local later, same_deadline, same_ms, same_epoch =\n\
             lease_unpack(lease_renewed(stored, '1765000030000'))\n\
           out[#out + 1] = tostring(later) .. '|' .. same_deadline .. '/' .. same_ms .. '|' .. same_epoch\n\
           local none, no_deadline, no_ms, kept = lease_unpack(lease_dropped(epoch))\n\
           out[#out + 1] = tostring(none) .. '|' .. no_deadline .. '/' .. no_ms .. '|' .. kept\n\
         end\n\
         for _, bad in ipairs({{'soon:::1', '1:2:3', '1:2:3:', '1:x::1', '1:::e'}}) do\n\
           out[#out + 1] = tostring(lease_unpack(bad))\n\
         end\n\
         out[#out + 1] = tostring(lease_unpack(false))\n\
         return out"
    );
    let out: Vec<String> = redis::cmd("EVAL")
        .arg(body)
        .arg(1)
        .arg("lease-probe")
        .query_async(&mut connection)
        .await?;
    let expected = [
        "1765000000000:1765000900000:900000:12",
        "1765000000000|1765000900000/900000|12",
        "1765000030000|1765000900000/900000|12",
        "nil|/|12",
        "1765000000000:::12",
        "1765000000000|/|12",
        "1765000030000|/|12",
        "nil|/|12",
        "nil",
        "nil",
        "nil",
        "nil",
        "nil",
        "nil",
    ]
    .map(str::to_owned);
    assert_eq!(out, expected);
    Ok(())
}
