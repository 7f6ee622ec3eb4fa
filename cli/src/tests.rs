//! Command-line parsing, table-driven through `try_parse_from`.

use clap::error::ErrorKind;

use super::*;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_checked(std::iter::once("taskctl").chain(args.iter().copied()))
}

#[test]
fn accepted_command_lines() {
    let table: &[(&[&str], &str)] = &[
        (&["card", "http://a"], "card"),
        (&["card", "http://a", "--json"], "card"),
        (
            &["card", "http://a", "--verify", "--jwks", "k.json"],
            "card",
        ),
        (&["--output", "human", "card", "http://a"], "card"),
        (
            &["--verify", "card", "http://a", "--revoked-kid", "k1"],
            "card",
        ),
        (
            &["--jwks", "k.json", "card", "http://a", "--verify"],
            "card",
        ),
        (
            &["get", "http://a", "t", "--verify", "--jwks", "k.json"],
            "get",
        ),
        (&["--verify", "list", "http://a"], "list"),
        (&["watch", "http://a", "t", "--verify"], "watch"),
        (&["invoke", "http://a", "echo"], "invoke"),
        (
            &[
                "invoke",
                "http://a",
                "echo",
                "{\"x\":1}",
                "--idempotency-key",
                "k",
            ],
            "invoke",
        ),
        (&["stream", "http://a", "count", "{\"n\":3}"], "stream"),
        (
            &[
                "invoke",
                "http://a",
                "echo",
                "{}",
                "--pay",
                "/tmp/key",
                "--max-amount",
                "0.25",
                "--x402-version",
                "1",
            ],
            "invoke",
        ),
        (&["stream", "http://a", "count", "--pay", "k"], "stream"),
        (
            &["send", "http://a", "echo", "{}", "--pay", "k", "--wait"],
            "send",
        ),
        (&["send", "http://a", "echo", "{}"], "send"),
        (
            &[
                "send",
                "http://a",
                "echo",
                "{}",
                "--wait",
                "--wait-timeout",
                "5",
            ],
            "send",
        ),
        (
            &[
                "send",
                "http://a",
                "echo",
                "{}",
                "--token-file",
                "/tmp/t",
                "--context-id",
                "c",
            ],
            "send",
        ),
        (&["get", "http://a", "t1", "--token", "x"], "get"),
        (
            &[
                "list",
                "http://a",
                "--status",
                "running,completed",
                "--limit",
                "10",
            ],
            "list",
        ),
        (
            &["list", "http://a", "--offset", "5", "--context-id", "c"],
            "list",
        ),
        (&["cancel", "http://a", "t1"], "cancel"),
        (&["watch", "http://a", "t1", "--output", "json"], "watch"),
        (&["admin", "settlements", "http://a"], "admin"),
        (
            &[
                "admin",
                "settle",
                "http://a",
                "t1",
                "settled",
                "--transaction",
                "0x01",
                "--note",
                "seen on chain",
            ],
            "admin",
        ),
        (
            &[
                "admin",
                "--operator-token-file",
                "f",
                "settle",
                "http://a",
                "t1",
                "void",
            ],
            "admin",
        ),
        (
            &[
                "--allow-origin",
                "http://a",
                "--timeout",
                "3",
                "get",
                "http://a",
                "t",
            ],
            "get",
        ),
    ];
    for (args, expected) in table {
        let cli = parse(args).map_err(|e| format!("{args:?}: {e}"));
        let name = cli.map(|cli| match cli.command {
            Command::Card(_) => "card",
            Command::Invoke(_) => "invoke",
            Command::Stream(_) => "stream",
            Command::Send(_) => "send",
            Command::Get(_) => "get",
            Command::List(_) => "list",
            Command::Cancel(_) => "cancel",
            Command::Watch(_) => "watch",
            Command::Admin(_) => "admin",
        });
        assert_eq!(name.as_deref(), Ok(*expected), "{args:?}");
    }
}

#[test]
fn refused_command_lines() {
    let table: &[(&[&str], ErrorKind)] = &[
        (&[], ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand),
        (&["bogus", "http://a"], ErrorKind::InvalidSubcommand),
        (&["card"], ErrorKind::MissingRequiredArgument),
        (
            &["send", "http://a", "echo"],
            ErrorKind::MissingRequiredArgument,
        ),
        (&["get", "http://a"], ErrorKind::MissingRequiredArgument),
        (
            &["list", "http://a", "--status", "done"],
            ErrorKind::ValueValidation,
        ),
        (
            &["list", "http://a", "--limit", "1001"],
            ErrorKind::ValueValidation,
        ),
        (
            &["card", "http://a", "--output", "xml"],
            ErrorKind::InvalidValue,
        ),
        (
            &["send", "http://a", "e", "{}", "--wait-timeout", "5"],
            ErrorKind::MissingRequiredArgument,
        ),
        (
            &["get", "http://a", "t", "--token", "x", "--token-file", "f"],
            ErrorKind::ArgumentConflict,
        ),
        (&["card", "http://a", "--nope"], ErrorKind::UnknownArgument),
        (
            &["card", "http://a", "--jwks", "keys.json"],
            ErrorKind::MissingRequiredArgument,
        ),
        (
            &["card", "http://a", "--pay", "k"],
            ErrorKind::UnknownArgument,
        ),
        (
            &["list", "http://a", "--revoked-kid", "k1"],
            ErrorKind::MissingRequiredArgument,
        ),
        (
            &["send", "http://a", "e", "{}", "--jwks", "k.json"],
            ErrorKind::MissingRequiredArgument,
        ),
        (
            &["invoke", "http://a", "e", "--x402-version", "3"],
            ErrorKind::ValueValidation,
        ),
        (
            &["invoke", "http://a", "e", "--max-amount", "1e3"],
            ErrorKind::ValueValidation,
        ),
        (
            &["invoke", "http://a", "e", "--max-amount", "0"],
            ErrorKind::ValueValidation,
        ),
        (
            &["invoke", "http://a", "e", "--max-amount", "0.0000001"],
            ErrorKind::ValueValidation,
        ),
    ];
    for (args, kind) in table {
        let error = parse(args).err().map(|e| e.kind());
        assert_eq!(error, Some(*kind), "{args:?}");
    }
}

#[test]
fn parsed_values() {
    let cli = parse(&["list", "http://a", "--status", "running,failed", "--json"]).ok();
    let Some(Cli {
        command: Command::List(list),
        global,
    }) = cli
    else {
        panic!("list did not parse");
    };
    assert!(global.json);
    assert_eq!(
        list.status,
        [protocol::TaskStatus::Running, protocol::TaskStatus::Failed]
    );
    assert_eq!(global.output, OutputFormat::Auto);
}

#[test]
fn token_sources_in_order() {
    let dir = std::env::temp_dir().join(format!("taskctl-token-{}", std::process::id()));
    let _ = std::fs::write(&dir, "  from-file-0123456789abcdef \n");
    let flag = token::resolve(Some("flag"), Some(&dir), Some("env"))
        .ok()
        .flatten();
    assert_eq!(flag.as_deref(), Some("flag"));
    let file = token::resolve(None, Some(&dir), Some("env")).ok().flatten();
    assert_eq!(file.as_deref(), Some("from-file-0123456789abcdef"));
    let env = token::resolve(None, None, Some(" env ")).ok().flatten();
    assert_eq!(env.as_deref(), Some("env"));
    assert_eq!(token::resolve(None, None, None).ok().flatten(), None);
    assert!(token::resolve(None, Some(&dir.join("missing")), None).is_err());
    let _ = std::fs::remove_file(&dir);
}

#[test]
fn input_must_be_json() {
    assert_eq!(parse_input(None).ok(), Some(serde_json::json!({})));
    assert_eq!(
        parse_input(Some("\"hi\"")).ok(),
        Some(serde_json::json!("hi"))
    );
    assert_eq!(
        parse_input(Some("hi")).err().map(|f| f.exit),
        Some(Exit::Usage)
    );
}

#[test]
fn control_characters_are_escaped_in_human_text() {
    assert_eq!(output::sanitize("a\tb\nc"), "a\tb\nc");
    assert_eq!(output::sanitize("x\u{1b}[2Jy"), "x\\u{1b}[2Jy");
}

/// Anvil's well-known key #0: a public test key.
const ANVIL_KEY_0: &str = "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80";

fn pay_args(args: &[&str]) -> Option<pay::PayArgs> {
    let mut line = vec!["invoke", "http://a", "echo"];
    line.extend_from_slice(args);
    match parse(&line).ok()?.command {
        Command::Invoke(invoke) => Some(invoke.pay),
        _ => None,
    }
}

#[test]
fn pay_flags_default_to_a_one_usdc_cap_and_v2() {
    let Some(args) = pay_args(&[]) else {
        panic!("invoke did not parse");
    };
    assert_eq!(args.pay, None);
    assert_eq!(args.max_amount, "1.0");
    assert_eq!(args.x402_version, 2);
    assert_eq!(args.max_validity_seconds, 300);
    let Some(capped) = pay_args(&["--max-validity-seconds", "45"]) else {
        panic!("--max-validity-seconds did not parse");
    };
    assert_eq!(capped.max_validity_seconds, 45);
    // No key anywhere: nothing pays.
    assert!(matches!(pay::resolve(&args, None), Ok(None)));
    assert!(matches!(pay::resolve(&args, Some("  ")), Ok(None)));
    // The key in the environment pays; its address is all its Debug shows.
    let payer = pay::resolve(&args, Some(ANVIL_KEY_0)).ok().flatten();
    let printed = format!("{payer:?}");
    assert!(printed.to_lowercase().contains("0xf39fd6e5"), "{printed}");
    assert!(!printed.contains(&ANVIL_KEY_0[2..]), "{printed}");
}

#[test]
fn a_bad_key_is_a_one_line_usage_error_that_never_echoes_it() {
    let dir = std::env::temp_dir().join(format!("taskctl-pay-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    // Almost a key: one hex digit short, then one that is not hex.
    let short = &ANVIL_KEY_0[..ANVIL_KEY_0.len() - 1];
    let not_hex = format!("0x{}zz", &ANVIL_KEY_0[2..64]);
    for (name, text) in [("short", short.to_owned()), ("not-hex", not_hex)] {
        let path = dir.join(name);
        let _ = std::fs::write(&path, &text);
        let Some(path_text) = path.to_str() else {
            panic!("temp path is not UTF-8");
        };
        let Some(args) = pay_args(&["--pay", path_text]) else {
            panic!("--pay did not parse");
        };
        // A good key in the environment does not rescue a bad file: the flag wins.
        let Err(failure) = pay::resolve(&args, Some(ANVIL_KEY_0)) else {
            panic!("{name}: a bad key file was accepted");
        };
        assert_eq!(failure.exit, Exit::Usage);
        assert!(!failure.message.contains('\n'), "{}", failure.message);
        assert!(failure.message.contains("--pay"), "{}", failure.message);
        assert!(
            !failure.message.contains(&text[2..40]),
            "{}",
            failure.message
        );
        assert!(!failure.details.to_string().contains(&text[2..40]));
    }
    let Some(args) = pay_args(&["--pay", "/nonexistent/taskctl-key"]) else {
        panic!("--pay did not parse");
    };
    assert!(matches!(
        pay::resolve(&args, None).map_err(|f| f.exit),
        Err(Exit::Usage)
    ));

    let Some(args) = pay_args(&[]) else {
        panic!("invoke did not parse");
    };
    let bad_env = format!("{}x", &ANVIL_KEY_0[..60]);
    let Err(failure) = pay::resolve(&args, Some(&bad_env)) else {
        panic!("a bad TASKCTL_PAY_KEY was accepted");
    };
    assert!(
        failure.message.starts_with(pay::KEY_VAR),
        "{}",
        failure.message
    );
    assert!(!failure.message.contains(&bad_env[2..40]));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn settlements_print_decoded() {
    let receipt = serde_json::json!({
        "success": true, "transaction": "0xfeed", "network": "base-sepolia",
        "payer": "0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266", "amount": "1000",
    });
    let settlement = client::Settlement {
        payment_response: Some(payments::wire::encode(&receipt)),
        ..Default::default()
    };
    let document = pay::settlement_json(&settlement);
    assert_eq!(
        document
            .as_ref()
            .map(|d| (&d["success"], &d["transaction"])),
        Some((&serde_json::json!(true), &serde_json::json!("0xfeed")))
    );
    let text = pay::settlement_text(&settlement).unwrap_or_default();
    assert_eq!(
        text,
        "success, amount 0.001 USDC, transaction 0xfeed, network base-sepolia, \
         payer 0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266"
    );
    assert_eq!(pay::settlement_json(&Default::default()), None);
    let garbled = client::Settlement {
        x_payment_response: Some("%%%".into()),
        ..Default::default()
    };
    assert!(
        pay::settlement_text(&garbled).is_some_and(|t| t.contains("does not decode")),
        "{garbled:?}"
    );
}

#[test]
fn verify_flags_are_global() {
    // Given before and after the subcommand: clap keeps the last place only; taskctl all.
    let cli = parse(&[
        "--revoked-kid",
        "a,b",
        "send",
        "http://a",
        "e",
        "{}",
        "--verify",
        "--revoked-kid",
        "c",
    ])
    .ok();
    let Some(Cli { global, .. }) = cli else {
        panic!("send did not parse");
    };
    assert!(global.verify);
    assert_eq!(global.revoked_kids, ["a", "b", "c"]);
    let trust = global.trust().ok();
    assert!(trust.is_some_and(
        |trust| trust.verify == client::Verify::Required && trust.revoked == ["a", "b", "c"]
    ));
    // A --jwks file that cannot be read is a usage error.
    let Some(Cli { global, .. }) = parse(&[
        "--verify",
        "--jwks",
        "/nonexistent/k.json",
        "card",
        "http://a",
    ])
    .ok() else {
        panic!("card did not parse");
    };
    assert_eq!(
        global.trust().err().map(|failure| failure.exit),
        Some(Exit::Usage)
    );
}
