//! The search checks of the contract kit: what [`SessionStore::search`]
//! finds, in which order, and that a backend's own search returns exactly
//! what the reference scan ([`search::scan`]) returns.

use palimpsest_core_session::{Event, SessionHeader};

use super::{clip, ev, header, must, Outcome, StoreFactory, T0};
use crate::search::{self, SearchHit, SearchQuery};
use crate::SessionStore;

/// An event of type `ty` with `data`, at `time`, appended to the surface
/// when it is a message (`tail` gives other envelope keys).
fn event_at(seq: u64, time: u64, ty: &str, data: &str, tail: &str) -> Event {
    ev(&format!(r#"{{"seq":{seq},"time":{time},"type":"{ty}","data":{data}{tail}}}"#))
}

fn json_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

const APPEND: &str = r#","surfaceOp":"append""#;

fn user(seq: u64, time: u64, text: &str) -> Event {
    let data = format!(
        r#"{{"message":{{"id":"u{seq}","role":"user","content":[{{"type":"text","text":{}}}],"source":{{"kind":"user"}}}}}}"#,
        json_str(text)
    );
    event_at(seq, time, "user/message", &data, APPEND)
}

fn assistant(seq: u64, time: u64, text: &str) -> Event {
    let data = format!(
        r#"{{"turn":1,"step":1,"message":{{"id":"a{seq}","role":"assistant","content":[{{"type":"text","text":{}}}],"source":{{"kind":"model","provider":"kit","model":"kit-1"}}}}}}"#,
        json_str(text)
    );
    event_at(seq, time, "assistant/message", &data, APPEND)
}

fn tool_result(seq: u64, time: u64, text: &str) -> Event {
    let data = format!(
        r#"{{"turn":1,"step":1,"message":{{"id":"r{seq}","role":"user","content":[{{"type":"tool-result","toolCallId":"c1","isError":false,"content":[{{"type":"text","text":{}}}]}}],"source":{{"kind":"tool","callId":"c1"}}}}}}"#,
        json_str(text)
    );
    event_at(seq, time, "tool/result", &data, APPEND)
}

fn chunk(seq: u64, time: u64, text: &str) -> Event {
    let data = format!(
        r#"{{"turn":1,"step":1,"chunk":{{"type":"text-delta","index":0,"text":{}}}}}"#,
        json_str(text)
    );
    event_at(seq, time, "assistant/chunk", &data, "")
}

fn tool_call(seq: u64, time: u64, arguments: &str) -> Event {
    let data =
        format!(r#"{{"turn":1,"step":1,"callId":"c1","name":"read","arguments":{}}}"#, json_str(arguments));
    event_at(seq, time, "tool/call", &data, "")
}

/// A summary that replaces seqs `start..=end` on the surface.
fn summary(seq: u64, time: u64, start: u64, end: u64, text: &str) -> Event {
    let data = format!(
        r#"{{"message":{{"id":"s{seq}","role":"user","content":[{{"type":"text","text":{}}}],"source":{{"kind":"plugin","plugin":"compaction"}}}}}}"#,
        json_str(text)
    );
    let sources: Vec<String> = (start..=end).map(|s| s.to_string()).collect();
    let tail = format!(
        r#","sourceEventSeqs":[{}],"surfaceOp":{{"op":"replace","start":{start},"end":{end}}}"#,
        sources.join(",")
    );
    event_at(seq, time, "context/message", &data, &tail)
}

fn query(words: &[&str]) -> SearchQuery {
    match SearchQuery::new(words) {
        Ok(q) => q,
        Err(e) => panic!("testkit bug: query {words:?} refused: {e}"),
    }
}

#[track_caller]
fn found(store: &dyn SessionStore, q: &SearchQuery) -> Vec<SearchHit> {
    must(store.search(q), &format!("search {:?}", q.terms()))
}

/// (session, seq, type) of each hit, for comparing.
fn keys(hits: &[SearchHit]) -> Vec<(String, u64, String)> {
    hits.iter().map(|h| (h.session_id.clone(), h.seq, h.event_type.clone())).collect()
}

fn key(session: &str, seq: u64, ty: &str) -> (String, u64, String) {
    (session.to_owned(), seq, ty.to_owned())
}

fn write(store: &dyn SessionStore, header: &SessionHeader, events: &[Event]) {
    must(store.create_with_events(header, events), &format!("create_with_events {:?}", clip(&header.id)));
}

/// The words of user, assistant and tool-result messages are found (with
/// the event's type, time and a snippet); the words of a chunk or of a
/// tool call's arguments are not, and nor are plugin events'.
pub fn search_finds_message_words_not_chunks(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let t = T0 + 1000;
    let events = [
        user(0, t, "Where is the Zephyr config?"),
        tool_call(1, t + 1, r#"{"path":"marmot.toml"}"#),
        tool_result(2, t + 2, "zephyr = true\nin marmot.toml"),
        chunk(3, t + 3, "quokka says"),
        assistant(4, t + 4, "The zephyr setting is on."),
        event_at(5, t + 5, "kit/note", r#"{"text":"zephyr wombat"}"#, ""),
    ];
    write(&*store, &header("search-a"), &events);
    let hits = found(&*store, &query(&["zephyr"]));
    assert_eq!(
        keys(&hits),
        [
            key("search-a", 0, "user/message"),
            key("search-a", 2, "tool/result"),
            key("search-a", 4, "assistant/message")
        ],
        "search `zephyr`: the user message, the tool result and the assistant message"
    );
    assert_eq!(hits[0].time, t, "a hit carries its event's time");
    assert_eq!(hits[0].snippet, "Where is the Zephyr config?", "a short message is its own snippet");
    assert_eq!(hits[1].snippet, "zephyr = true in marmot.toml", "newlines fold to spaces in a snippet");
    for word in ["quokka", "wombat", "path"] {
        assert_eq!(
            found(&*store, &query(&[word])),
            [],
            "`{word}` is only in a chunk, a plugin event or tool arguments"
        );
    }
    assert_eq!(keys(&found(&*store, &query(&["marmot"]))), [key("search-a", 2, "tool/result")]);
    Outcome::Ran
}

/// Terms match whole tokens in any case, and a hit holds every term.
pub fn search_is_case_insensitive_and_needs_every_term(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let events = [
        user(0, T0, "Deploy the ÉLAN service"),
        assistant(1, T0 + 1, "élan deployed; DEPLOY done"),
        user(2, T0 + 2, "deployment of elan"),
    ];
    write(&*store, &header("search-b"), &events);
    assert_eq!(
        keys(&found(&*store, &query(&["deploy", "Élan"]))),
        [key("search-b", 0, "user/message"), key("search-b", 1, "assistant/message")],
        "`deploy élan`: both terms, any case; `deployment` and `elan` are other tokens"
    );
    assert_eq!(keys(&found(&*store, &query(&["SERVICE"]))), [key("search-b", 0, "user/message")]);
    assert_eq!(found(&*store, &query(&["deploy", "missing"])), [], "every term is required");
    assert_eq!(found(&*store, &query(&["deplo"])), [], "a term matches whole tokens, not prefixes");
    assert_eq!(
        keys(&found(&*store, &query(&["deployed-done"]))),
        [key("search-b", 1, "assistant/message")],
        "a word with punctuation is its tokens, each required"
    );
    Outcome::Ran
}

/// A message that a compaction shadowed is still found, and so is the
/// summary that replaced it: search covers the log, not the surface.
pub fn search_finds_shadowed_messages(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let events = [
        user(0, T0, "the walrus question"),
        assistant(1, T0 + 1, "walrus answer"),
        summary(2, T0 + 2, 0, 1, "Summary: they talked about a walrus."),
    ];
    write(&*store, &header("search-c"), &events);
    assert_eq!(
        keys(&found(&*store, &query(&["walrus"]))),
        [
            key("search-c", 0, "user/message"),
            key("search-c", 1, "assistant/message"),
            key("search-c", 2, "context/message")
        ],
        "shadowed messages and the summary are all found"
    );
    Outcome::Ran
}

/// Hits come session by session, latest activity (time of the last event)
/// first, ties by id, then by seq; the limit keeps the first hits in that
/// order.
pub fn search_orders_by_last_activity_then_seq_and_limits(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    let session = |id: &str, last: u64| {
        let events = [
            user(0, T0, "ping one"),
            assistant(1, T0 + 1, "no"),
            user(2, T0 + 2, "ping two"),
            assistant(3, last, "x"),
        ];
        write(&*store, &header(id), &events);
    };
    session("old", T0 + 100);
    session("new", T0 + 300);
    session("mid-b", T0 + 200);
    session("mid-a", T0 + 200);
    let all = found(&*store, &query(&["ping"]));
    let expected: Vec<_> = ["new", "mid-a", "mid-b", "old"]
        .iter()
        .flat_map(|s| [key(s, 0, "user/message"), key(s, 2, "user/message")])
        .collect();
    assert_eq!(keys(&all), expected, "newest activity first, ties by id, then by seq");
    let three = found(&*store, &query(&["ping"]).with_limit(3));
    assert_eq!(keys(&three), expected[..3], "--limit 3 keeps the first three in order");
    assert_eq!(found(&*store, &query(&["ping"]).with_limit(0)), [], "a limit of 0 finds nothing");
    // An append moves a session to the front.
    must(store.append("old", &[user(4, T0 + 400, "ping three")]), "append to `old`");
    let first = found(&*store, &query(&["ping"]).with_limit(1));
    assert_eq!(keys(&first), [key("old", 0, "user/message")], "the session appended last comes first");
    Outcome::Ran
}

/// A query without a letter or digit is refused before any store is asked
/// (`search-query-empty`); an empty store finds nothing.
pub fn search_refuses_an_empty_query(factory: &dyn StoreFactory) -> Outcome {
    for words in [&[][..], &[""][..], &["--", " ", "?!"][..]] {
        match SearchQuery::new(words) {
            Err(e) => assert_eq!(e.code(), search::SEARCH_QUERY_EMPTY, "query {words:?}"),
            Ok(q) => panic!("query {words:?} was accepted as {:?}", q.terms()),
        }
    }
    let store = factory.open();
    assert_eq!(found(&*store, &query(&["anything"])), [], "an empty store has no hits");
    Outcome::Ran
}

/// What is appended, created whole or deleted is what search sees, also
/// through a store opened again.
pub fn search_follows_appends_and_deletes(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    write(&*store, &header("search-d"), &[user(0, T0, "first lemur")]);
    must(store.create(&header("search-e")), "create `search-e`");
    must(store.append("search-e", &[user(0, T0 + 5, "a lemur too")]), "append to `search-e`");
    must(store.append("search-d", &[assistant(1, T0 + 1, "second lemur")]), "append to `search-d`");
    let expected = [
        key("search-e", 0, "user/message"),
        key("search-d", 0, "user/message"),
        key("search-d", 1, "assistant/message"),
    ];
    assert_eq!(keys(&found(&*store, &query(&["lemur"]))), expected);
    drop(store);
    let store = factory.open();
    assert_eq!(keys(&found(&*store, &query(&["lemur"]))), expected, "after reopening");
    must(store.delete("search-e"), "delete `search-e`");
    assert_eq!(keys(&found(&*store, &query(&["lemur"]))), expected[1..], "a deleted session is not found");
    // The id can be used again, and its old messages stay gone.
    write(&*store, &header("search-e"), &[user(0, T0 + 9, "no primates here")]);
    assert_eq!(keys(&found(&*store, &query(&["lemur"]))), expected[1..], "after the id was reused");
    Outcome::Ran
}

/// Words with the cases that tokenizers differ on: case, accents,
/// punctuation inside a word, symbols, digits, scripts without case.
const VOCABULARY: &[&str] = &[
    "alpha",
    "Alpha",
    "ALPHA",
    "beta",
    "gamma-ray",
    "don't",
    "a+b",
    "x_y",
    "C++",
    "naïve",
    "NAÏVE",
    "café",
    "İstanbul",
    "straße",
    "STRASSE",
    "日本語",
    "данные",
    "Данные",
    "42",
    "3.14",
    "v1.2.3",
    "e-mail",
    "user@example.com",
    "😀",
    "a😀b",
    "tab\there",
    "line\nbreak",
    "$HOME",
    "#tag",
    "ﬁle",
    "Ωmega",
    // Letters with combining marks (category M), which the reference keeps
    // in a token and some tokenizers cut at: Devanagari vowel signs, Thai
    // vowels, Arabic harakat; a virama, which the reference cuts at.
    "भाषा",
    "हिन्दी",
    "ภาษาไทย",
    "สวัสดี",
    "عَرَبِيّ",
    "عربي",
    // Alphanumeric symbols (category So, No, Nl), and a combining accent
    // after a plain letter (not alphanumeric: `e` and `te`).
    "Ⓐ",
    "ⓐ",
    "①",
    "Ⅻ",
    "e\u{301}te",
    "中文",
    "١٢٣",
    "👍🏽",
];

/// Words of the scripts and symbols tokenizers disagree on, each found as
/// the reference cuts it ([`char::is_alphanumeric`] runs, lowercased): a
/// vowel sign, a harakat or a circled letter is part of its token, a piece
/// of a token is not a token.
fn search_finds_words_of_every_script(store: &dyn SessionStore) {
    let texts = [
        "Hindi: भाषा",
        "हिन्दी भाषा",
        "Thai: ภาษาไทย สวัสดี",
        "Arabic: عَرَبِيّ",
        "circled Ⓐ and ①",
        "cafe\u{301} e\u{301}te",
        "中文 and 日本語 😀 ok",
    ];
    let events: Vec<Event> = (0..).zip(texts).map(|(seq, text)| user(seq, T0 + seq, text)).collect();
    write(store, &header("scripts"), &events);
    let cases: &[(&[&str], &[u64])] = &[
        (&["भाषा"], &[0, 1]),
        (&["हिन्दी"], &[1]),
        (&["भ"], &[]),
        (&["ष"], &[]),
        (&["ภาษาไทย"], &[2]),
        (&["สวัสดี"], &[2]),
        (&["ส"], &[]),
        (&["عَرَبِيّ"], &[3]),
        (&["عربي"], &[]),
        (&["ع"], &[]),
        (&["Ⓐ"], &[4]),
        (&["ⓐ"], &[4]),
        (&["①"], &[4]),
        (&["ⓐ", "①"], &[4]),
        (&["ⓐ", "circled"], &[4]),
        (&["and"], &[4, 6]),
        (&["cafe"], &[5]),
        (&["e", "te"], &[5]),
        (&["café"], &[]),
        (&["中文"], &[6]),
        (&["日本語", "😀", "ok"], &[6]),
    ];
    for (words, seqs) in cases {
        let q = query(words);
        let expected: Vec<_> = seqs.iter().map(|&s| key("scripts", s, "user/message")).collect();
        assert_eq!(keys(&found(store, &q)), expected, "search {words:?}");
        let reference = must(search::scan(store, &q), "the reference scan");
        assert_eq!(found(store, &q), reference, "search {words:?} differs from the reference scan");
    }
}

/// Words of every script are found as the reference cuts them (vowel
/// signs, harakat and circled letters inside a token, a token's pieces not
/// found); then, on a random-ish corpus of many sessions, every query
/// (single words, pairs, pieces of words, with and without a limit)
/// returns exactly what the reference scan returns: the same hits, order
/// and snippets.
pub fn search_agrees_with_the_reference_scan(factory: &dyn StoreFactory) -> Outcome {
    let store = factory.open();
    search_finds_words_of_every_script(&*store);
    let mut rng = super::SplitMix64::new(0x9E37_79B9_7F4A_7C15);
    for s in 0..12u64 {
        let n = 5 + rng.below(20);
        let mut events = Vec::new();
        for seq in 0..n {
            let words: Vec<&str> = (0..1 + rng.below(8))
                .map(|_| VOCABULARY[rng.below(VOCABULARY.len() as u64) as usize])
                .collect();
            let text = words.join(if rng.below(3) == 0 { "," } else { " " });
            let time = T0 + s * 7 + seq * 3 + rng.below(50);
            events.push(match rng.below(5) {
                0 => user(seq, time, &text),
                1 => assistant(seq, time, &text),
                2 => tool_result(seq, time, &text),
                3 => chunk(seq, time, &text),
                _ => tool_call(seq, time, &text),
            });
        }
        write(&*store, &header(&format!("corpus-{s:02}")), &events);
    }
    let mut queries: Vec<Vec<&str>> = VOCABULARY.iter().map(|w| vec![*w]).collect();
    for _ in 0..30 {
        let a = VOCABULARY[rng.below(VOCABULARY.len() as u64) as usize];
        let b = VOCABULARY[rng.below(VOCABULARY.len() as u64) as usize];
        queries.push(vec![a, b]);
    }
    queries.extend([vec!["i̇stanbul"], vec!["STRASSE"], vec!["file"], vec!["omega"], vec!["ωmega"]]);
    // Pieces of words, and words with and without their marks.
    queries.extend([
        vec!["भ"],
        vec!["ष"],
        vec!["हिन", "दी"],
        vec!["ส"],
        vec!["ع"],
        vec!["a"],
        vec!["ⓐ", "alpha"],
        vec!["e"],
        vec!["ⅻ"],
        vec!["١٢٣", "भाषा"],
    ]);
    let mut any = 0;
    for words in &queries {
        let Ok(q) = SearchQuery::new(words) else { continue };
        for q in [q.clone(), q.with_limit(3)] {
            let own = found(&*store, &q);
            let reference = must(search::scan(&*store, &q), "the reference scan");
            assert_eq!(
                own,
                reference,
                "search {words:?} (limit {:?}) differs from the reference scan",
                q.limit()
            );
            any += own.len();
        }
    }
    assert!(any > 100, "the corpus should give many hits, got {any}");
    Outcome::Ran
}
