//! `summarize`: a small extractive summary. The text is split into sentences, words are scored
//! by how often they occur (stopwords aside), each sentence by the mean score of its words, and
//! the best `input.sentences` sentences are returned in their original order.
//!
//! Hand-rolled, no crate: the whole algorithm is a page of code, and what crates.io offers for
//! it is either a full NLP stack (models, tokenizer data, heavy builds) for a demo entrypoint or
//! small, unmaintained summarizers that pull in their own regex and stemming dependencies.
//! English stopwords only; other languages still work, just without stopword filtering.

use std::collections::{HashMap, HashSet};
use std::sync::LazyLock;

use protocol::ErrorCode;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use payments::U256;
use payments::amount::to_decimal;
use serde_json::{Value, json};

use crate::entrypoint::Entrypoint;
use crate::handler::{HandlerError, TaskContext};

pub const KEY: &str = "summarize";

pub const DEFAULT_SENTENCES: usize = 3;
pub const MAX_SENTENCES: usize = 20;

/// Sentences shorter than this count as this long when normalising scores, so a two-word
/// fragment made of frequent words does not beat the sentences that actually say something.
const MIN_SCORED_WORDS: usize = 6;

/// Texts longer than this (bytes) are summarized on the blocking pool, off the async workers.
const BLOCKING_THRESHOLD: usize = 64 * 1024;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct SummarizeInput {
    /// The text to summarize: at least one word (a letter or digit), which the pattern says in
    /// the published schema (`\w` but `_`), so the gateway refuses a wordless text up front.
    #[schemars(length(min = 1), regex(pattern = r"[^\W_]"))]
    pub text: String,
    /// How many sentences to keep (at most 20).
    #[serde(default = "default_sentences")]
    #[schemars(range(min = 1, max = 20))]
    pub sentences: usize,
}

fn default_sentences() -> usize {
    DEFAULT_SENTENCES
}

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SummarizeOutput {
    /// The picked sentences in their original order, whitespace collapsed, joined by spaces.
    pub summary: String,
    /// How many sentences were picked.
    pub sentences: usize,
    /// How many words the input has.
    pub words: usize,
}

pub fn entrypoint() -> Entrypoint {
    let typed = Entrypoint::typed(
        KEY,
        "Extractive summary: the input.sentences (default 3) most salient sentences of input.text",
        run,
    );
    // Metered: each run reports what it used, `usage: {"words": N, "charge": "…"}` at one
    // millionth of a USDC per word of input, which an `upto` price settles for.
    let summarize = typed.handler.clone();
    let metered = move |input: Value, ctx: TaskContext| {
        let summarize = summarize.clone();
        async move {
            let mut output = summarize.call(input, ctx).await?;
            let words = output.output["words"].as_u64().unwrap_or(0);
            output.usage = Some(json!({ "words": words }));
            Ok::<_, HandlerError>(output.with_charge(to_decimal(U256::from(words))))
        }
    };
    Entrypoint {
        handler: std::sync::Arc::new(metered),
        ..typed
    }
}

async fn run(input: SummarizeInput, _ctx: TaskContext) -> Result<SummarizeOutput, HandlerError> {
    let SummarizeInput { text, sentences } = input;
    if text.trim().is_empty() {
        return Err(HandlerError::invalid_input("text must not be empty"));
    }
    if !(1..=MAX_SENTENCES).contains(&sentences) {
        return Err(HandlerError::invalid_input(format!(
            "sentences must be between 1 and {MAX_SENTENCES}"
        )));
    }
    let output = if text.len() > BLOCKING_THRESHOLD {
        tokio::task::spawn_blocking(move || summarize(&text, sentences))
            .await
            .map_err(|err| {
                HandlerError::new(
                    ErrorCode::InternalError.as_str(),
                    format!("summarizer failed: {err}"),
                )
            })?
    } else {
        summarize(&text, sentences)
    };
    if output.words == 0 {
        return Err(HandlerError::invalid_input("text contains no words"));
    }
    Ok(output)
}

struct Sentence<'a> {
    text: &'a str,
    words: Vec<String>,
}

/// The `max_sentences` most salient sentences of `text`, in their original order.
pub fn summarize(text: &str, max_sentences: usize) -> SummarizeOutput {
    let sentences: Vec<Sentence<'_>> = split_sentences(text)
        .into_iter()
        .map(|text| Sentence {
            text,
            words: tokenize(text),
        })
        .collect();
    let words = sentences.iter().map(|s| s.words.len()).sum();

    let mut frequency: HashMap<&str, usize> = HashMap::new();
    for word in sentences.iter().flat_map(|s| &s.words) {
        if is_content_word(word) {
            *frequency.entry(word.as_str()).or_default() += 1;
        }
    }
    let top = frequency.values().copied().max().unwrap_or(1) as f64;
    let scores: Vec<f64> = sentences
        .iter()
        .map(|s| {
            let salience: f64 = s
                .words
                .iter()
                .filter_map(|word| frequency.get(word.as_str()))
                .map(|&count| count as f64 / top)
                .sum();
            salience / s.words.len().max(MIN_SCORED_WORDS) as f64
        })
        .collect();

    // Best first; equal scores keep text order.
    let mut ranked: Vec<usize> = (0..sentences.len())
        .filter(|&i| !sentences[i].words.is_empty())
        .collect();
    ranked.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));

    // A repeated sentence is picked once.
    let mut seen: HashSet<&[String]> = HashSet::new();
    let mut picked: Vec<usize> = ranked
        .into_iter()
        .filter(|&i| seen.insert(sentences[i].words.as_slice()))
        .take(max_sentences)
        .collect();
    picked.sort_unstable();

    let summary = picked
        .iter()
        .map(|&i| collapse_whitespace(sentences[i].text))
        .collect::<Vec<_>>()
        .join(" ");
    SummarizeOutput {
        summary,
        sentences: picked.len(),
        words,
    }
}

fn collapse_whitespace(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn is_terminator(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…')
}

/// Quotes and brackets that close a sentence after its terminator: `He said "no." Then`.
fn is_closer(c: char) -> bool {
    matches!(c, '"' | '\'' | '”' | '’' | ')' | ']' | '»')
}

/// Words whose trailing `.` does not end a sentence (case-sensitive: `Dr. Smith`, `50 ms.`).
const ABBREVIATIONS: &[&str] = &[
    "Mr", "Mrs", "Ms", "Dr", "Prof", "Sr", "Jr", "St", "Mt", "Gen", "Gov", "Sen", "Rep", "Capt",
    "Lt", "Col", "Sgt", "Inc", "Ltd", "Corp", "Co", "Fig", "vs", "cf", "al", "approx",
];

/// Whether the `.` right after `before` belongs to an abbreviation: a known one, or a single
/// letter (initials as in `J. R. R. Tolkien`, and the last letter of `e.g.` or `i.e.`).
fn ends_with_abbreviation(before: &str) -> bool {
    let start = before
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphabetic())
        .last()
        .map_or(before.len(), |(i, _)| i);
    let word = &before[start..];
    match word.chars().count() {
        0 => false,
        1 => true,
        _ => ABBREVIATIONS.contains(&word),
    }
}

/// Splits at `.`, `!`, `?` or `…` (with any further terminators and closing quotes) followed
/// by whitespace or the end, except after abbreviations, and at blank lines. Returns the
/// trimmed, non-empty sentences.
fn split_sentences(text: &str) -> Vec<&str> {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut sentences = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < chars.len() {
        let (at, c) = chars[i];
        if is_terminator(c) {
            let mut j = i + 1;
            while j < chars.len() && (is_terminator(chars[j].1) || is_closer(chars[j].1)) {
                j += 1;
            }
            let end = chars.get(j).map_or(text.len(), |&(pos, _)| pos);
            let at_boundary = chars.get(j).is_none_or(|&(_, next)| next.is_whitespace());
            let abbreviation = c == '.' && j == i + 1 && ends_with_abbreviation(&text[start..at]);
            if at_boundary && !abbreviation {
                push_trimmed(&mut sentences, &text[start..end]);
                start = end;
            }
            i = j;
            continue;
        }
        if c == '\n' {
            // A blank line (only whitespace between two newlines) ends a paragraph.
            let mut j = i + 1;
            while j < chars.len() && chars[j].1.is_whitespace() && chars[j].1 != '\n' {
                j += 1;
            }
            if let Some(&(next_line, '\n')) = chars.get(j) {
                push_trimmed(&mut sentences, &text[start..at]);
                start = next_line;
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    push_trimmed(&mut sentences, &text[start..]);
    sentences
}

fn push_trimmed<'a>(sentences: &mut Vec<&'a str>, piece: &'a str) {
    let piece = piece.trim();
    if !piece.is_empty() {
        sentences.push(piece);
    }
}

/// Lowercase words: runs of letters and digits, with inner apostrophes kept (`don't`) and a
/// possessive `'s` dropped (`rust's` -> `rust`).
fn tokenize(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_alphanumeric() {
            word.extend(c.to_lowercase());
        } else if matches!(c, '\'' | '’')
            && !word.is_empty()
            && chars.peek().is_some_and(|next| next.is_alphanumeric())
        {
            word.push('\'');
        } else if !word.is_empty() {
            words.push(finish_word(std::mem::take(&mut word)));
        }
    }
    if !word.is_empty() {
        words.push(finish_word(word));
    }
    words
}

fn finish_word(mut word: String) -> String {
    if word.ends_with("'s") && word.len() > 2 {
        word.truncate(word.len() - 2);
    }
    word
}

fn is_content_word(word: &str) -> bool {
    word.chars().nth(1).is_some() && !STOPWORDS.contains(word)
}

/// Common English function words, which say nothing about what a text is about.
static STOPWORDS: LazyLock<HashSet<&'static str>> = LazyLock::new(|| {
    [
        "a",
        "about",
        "above",
        "after",
        "again",
        "against",
        "all",
        "also",
        "am",
        "an",
        "and",
        "any",
        "are",
        "aren't",
        "as",
        "at",
        "be",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "by",
        "can",
        "can't",
        "cannot",
        "could",
        "couldn't",
        "did",
        "didn't",
        "do",
        "does",
        "doesn't",
        "doing",
        "don't",
        "down",
        "during",
        "each",
        "even",
        "ever",
        "every",
        "few",
        "for",
        "from",
        "further",
        "had",
        "hadn't",
        "has",
        "hasn't",
        "have",
        "haven't",
        "having",
        "he",
        "he'd",
        "he'll",
        "her",
        "here",
        "hers",
        "herself",
        "him",
        "himself",
        "his",
        "how",
        "however",
        "i",
        "i'd",
        "i'll",
        "i'm",
        "i've",
        "if",
        "in",
        "into",
        "is",
        "isn't",
        "it",
        "it'll",
        "its",
        "itself",
        "just",
        "let's",
        "like",
        "many",
        "may",
        "me",
        "might",
        "more",
        "most",
        "much",
        "must",
        "my",
        "myself",
        "no",
        "nor",
        "not",
        "now",
        "of",
        "off",
        "often",
        "on",
        "once",
        "one",
        "only",
        "or",
        "other",
        "our",
        "ours",
        "ourselves",
        "out",
        "over",
        "own",
        "same",
        "she",
        "she'd",
        "she'll",
        "should",
        "shouldn't",
        "so",
        "some",
        "still",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "themselves",
        "then",
        "there",
        "these",
        "they",
        "they'd",
        "they'll",
        "they're",
        "they've",
        "this",
        "those",
        "though",
        "through",
        "to",
        "too",
        "under",
        "until",
        "up",
        "upon",
        "us",
        "very",
        "was",
        "wasn't",
        "we",
        "we'd",
        "we'll",
        "we're",
        "we've",
        "were",
        "weren't",
        "what",
        "when",
        "where",
        "whether",
        "which",
        "while",
        "who",
        "whom",
        "whose",
        "why",
        "will",
        "with",
        "won't",
        "would",
        "wouldn't",
        "yet",
        "you",
        "you'd",
        "you'll",
        "you're",
        "you've",
        "your",
        "yours",
        "yourself",
        "yourselves",
    ]
    .into_iter()
    .collect()
});

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::builtins::test_support::{Harness, TestResult, error, output};

    const ARTICLE: &str = "Rust is a systems programming language. \
        The weather was pleasant yesterday. \
        The Rust compiler checks memory safety at compile time, so Rust programs avoid data races. \
        My neighbour's cat enjoys long naps. \
        Rust programs are fast because the Rust compiler optimizes aggressively.";

    #[tokio::test]
    async fn picks_the_most_salient_sentences_in_original_order() -> TestResult {
        let input = json!({"text": ARTICLE, "sentences": 2});
        let (_task, outcome) = Harness::run(&entrypoint(), input).await?;
        assert_eq!(
            output(outcome)?,
            json!({
                "summary": "The Rust compiler checks memory safety at compile time, so Rust programs \
                    avoid data races. Rust programs are fast because the Rust compiler optimizes \
                    aggressively.",
                "sentences": 2,
                "words": 42,
            })
        );
        Ok(())
    }

    #[tokio::test]
    async fn defaults_to_three_sentences() -> TestResult {
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"text": ARTICLE})).await?;
        let out = output(outcome)?;
        assert_eq!(out["sentences"], json!(DEFAULT_SENTENCES));
        assert_eq!(
            out["summary"],
            json!(
                "Rust is a systems programming language. The Rust compiler checks memory safety \
                 at compile time, so Rust programs avoid data races. Rust programs are fast \
                 because the Rust compiler optimizes aggressively."
            )
        );
        Ok(())
    }

    #[tokio::test]
    async fn a_short_text_is_returned_whole() -> TestResult {
        let input = json!({"text": "  One sentence only,\n  with a line break  ", "sentences": 5});
        let (_task, outcome) = Harness::run(&entrypoint(), input).await?;
        assert_eq!(
            output(outcome)?,
            json!({"summary": "One sentence only, with a line break", "sentences": 1, "words": 7})
        );
        Ok(())
    }

    #[tokio::test]
    async fn rejects_empty_text_and_bad_counts() -> TestResult {
        for input in [
            json!({"text": ""}),
            json!({"text": " \n\t "}),
            json!({"text": "?! ... !"}),
            json!({}),
            json!({"text": 3}),
            json!({"text": "Fine.", "sentences": 0}),
            json!({"text": "Fine.", "sentences": MAX_SENTENCES + 1}),
        ] {
            let (_task, outcome) = Harness::run(&entrypoint(), input.clone()).await?;
            assert_eq!(error(outcome)?.code, "invalid_input", "{input}");
        }
        Ok(())
    }

    #[tokio::test]
    async fn summarizes_a_large_text_off_the_async_workers() -> TestResult {
        let text = ARTICLE.repeat(BLOCKING_THRESHOLD / ARTICLE.len() + 1);
        let (_task, outcome) = Harness::run(&entrypoint(), json!({"text": text})).await?;
        let out = output(outcome)?;
        // Repeats are picked once.
        assert_eq!(out["sentences"], json!(3));
        Ok(())
    }

    #[test]
    fn splits_at_terminators_followed_by_whitespace() {
        assert_eq!(
            split_sentences("Hello there! Is it 3.14? Yes... \"Quite.\" (Really.) End"),
            vec![
                "Hello there!",
                "Is it 3.14?",
                "Yes...",
                "\"Quite.\"",
                "(Really.)",
                "End"
            ]
        );
    }

    #[test]
    fn keeps_abbreviations_and_initials_inside_sentences() {
        assert_eq!(
            split_sentences(
                "Dr. Smith met J. R. R. Tolkien, e.g. at Oxford vs. Cambridge. It took 50 ms. Done."
            ),
            vec![
                "Dr. Smith met J. R. R. Tolkien, e.g. at Oxford vs. Cambridge.",
                "It took 50 ms.",
                "Done."
            ]
        );
    }

    #[test]
    fn splits_at_blank_lines() {
        assert_eq!(
            split_sentences("A heading\n\nFirst line\nsame sentence.\n \nNext"),
            vec!["A heading", "First line\nsame sentence.", "Next"]
        );
    }

    #[test]
    fn tokenizes_lowercase_words() {
        assert_eq!(
            tokenize("Don't panic: Rust's borrow-checker, v2 — ÉTÉ’s end."),
            vec![
                "don't", "panic", "rust", "borrow", "checker", "v2", "été", "end"
            ]
        );
    }

    #[test]
    fn stopwords_are_not_scored() {
        assert!(!is_content_word("the"));
        assert!(!is_content_word("don't"));
        assert!(!is_content_word("x"));
        assert!(is_content_word("compiler"));
    }

    #[test]
    fn equal_scores_keep_text_order() {
        let out = summarize("Alpha beta gamma. Delta epsilon zeta. Eta theta iota.", 2);
        assert_eq!(out.summary, "Alpha beta gamma. Delta epsilon zeta.");
        assert_eq!(out.words, 9);
    }
}
