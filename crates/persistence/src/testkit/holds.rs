//! The hold checks of the contract kit: one writer per session
//! ([`SessionStore::hold`](crate::SessionStore::hold), [`renew`](crate::SessionStore::renew),
//! [`release`](crate::SessionStore::release)), between two stores opened on the
//! same location as two workers would have them.
//!
//! A store that grants no holds (`hold` returns `Ok(None)`) skips them; a
//! hold with no expiry (an operating-system lock) skips the takeover check,
//! which needs a lease to expire.

use std::time::Duration;

use super::{append, assert_stored, create, header, must, must_fail, ticks, Outcome, StoreFactory};

const GRANTS_NO_HOLDS: &str = "the store grants no holds (`SessionStore::hold` returned `Ok(None)`)";
const HOLDS_NEVER_EXPIRE: &str =
    "the store's holds do not expire (an operating-system lock): no takeover to check";

/// Long enough never to expire during a check.
const LONG: Duration = Duration::from_secs(60);

/// While one store holds a session, a second store's hold is refused with
/// `locked` (naming the holder, when the hold is a lease), and so is its
/// append, with nothing written; the holder appends. Once released, the
/// second store takes the hold, and the first one's appends are refused in
/// turn. A hold on a session that does not exist is `not-found`.
pub fn holds_keep_a_second_writer_out(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-holds");
    let a = factory.open();
    let b = factory.open();
    create(&*a, &h);
    append(&*a, &h.id, &ticks(0..2));
    let Some(held) = must(a.hold(&h.id, "worker-a", LONG), "the first store's hold") else {
        return Outcome::Skipped(GRANTS_NO_HOLDS);
    };
    assert_eq!((held.session_id(), held.holder()), (h.id.as_str(), "worker-a"), "what the hold names");
    must_fail(a.hold("kit-no-such-session", "worker-a", LONG), "not-found", "a hold on a missing session");

    let refused =
        must_fail(b.hold(&h.id, "worker-b", LONG), "locked", "a second store's hold on a held session");
    if held.expires_at().is_some() {
        assert!(refused.to_string().contains("worker-a"), "`locked` must name the holder: {refused}");
    }
    must_fail(b.append(&h.id, &ticks(2..3)), "locked", "a second store's append to a held session");
    assert_stored(&*a, &h, &ticks(0..2), "after the refused append");
    append(&*a, &h.id, &ticks(2..3));

    must(a.release(&held), "releasing the hold");
    if held.expires_at().is_some() {
        // A renewal racing the release (a background renewal) must not
        // bring the hold back with no store that knows its token.
        must_fail(a.renew(&held, LONG), "locked", "renewing a released hold");
    }
    let taken = must(b.hold(&h.id, "worker-b", LONG), "the second store's hold after the release")
        .unwrap_or_else(|| panic!("a store that granted one hold granted none the second time"));
    if held.expires_at().is_some() {
        assert!(taken.token() > held.token(), "a new grant's token must be larger: {taken:?} after {held:?}");
    }
    must_fail(
        a.append(&h.id, &ticks(3..4)),
        "locked",
        "the first store's append after the session changed hands",
    );
    append(&*b, &h.id, &ticks(3..4));
    must(b.release(&taken), "releasing the second hold");
    must(a.release(&held), "releasing a hold that was released and taken since (changes nothing)");
    drop((a, b));
    assert_stored(&*factory.open(), &h, &ticks(0..4), "after two holders in turn");
    Outcome::Ran
}

/// A lease that expired unrenewed is taken over by another holder with a
/// larger token; from then on the first holder, which was only paused,
/// is fenced out: its appends are refused with `locked` before anything
/// is written, and so is its renewal. A live lease is renewed with its
/// token unchanged.
pub fn an_expired_hold_is_taken_over_and_its_holder_fenced_out(factory: &dyn StoreFactory) -> Outcome {
    let h = header("kit-hold-takeover");
    let a = factory.open();
    let b = factory.open();
    create(&*a, &h);
    append(&*a, &h.id, &ticks(0..1));
    let Some(held) = must(a.hold(&h.id, "worker-a", LONG), "the first store's hold") else {
        return Outcome::Skipped(GRANTS_NO_HOLDS);
    };
    if held.expires_at().is_none() {
        must(a.release(&held), "releasing the hold");
        return Outcome::Skipped(HOLDS_NEVER_EXPIRE);
    }
    let renewed = must(a.renew(&held, LONG), "renewing a live hold");
    assert_eq!(renewed.token(), held.token(), "a renewal keeps the token");

    // Shorten it, then let it run out: the first worker "pauses".
    let short = must(a.renew(&held, Duration::from_millis(100)), "renewing for a short while");
    std::thread::sleep(Duration::from_millis(400));
    let taken = must(b.hold(&h.id, "worker-b", LONG), "taking over an expired hold")
        .unwrap_or_else(|| panic!("a store that granted one hold granted none the second time"));
    assert!(taken.token() > short.token(), "a takeover's token must be larger: {taken:?} after {short:?}");

    let fenced = must_fail(a.append(&h.id, &ticks(1..2)), "locked", "the paused first holder's append");
    assert!(fenced.to_string().contains("worker-b"), "`locked` must name the new holder: {fenced}");
    must_fail(a.renew(&short, LONG), "locked", "the paused first holder's renewal");
    assert_stored(&*b, &h, &ticks(0..1), "after the fenced append");
    append(&*b, &h.id, &ticks(1..2));
    must(b.release(&taken), "releasing the new hold");
    Outcome::Ran
}

/// Only the current hold is given up: a release naming another holder, or
/// the token of an earlier grant of the session (a stale hold, kept by a
/// worker that gave it up and took it again, or a forged one), changes
/// nothing and is not an error. The holder keeps the session (another
/// store's hold and append are still `locked`), appends and renews; its
/// own release then frees it. A new grant's token is larger than the last,
/// so an earlier grant's hold never names the current one. Once the
/// session is deleted, a renewal is `not-found` and a release changes
/// nothing.
pub fn only_the_current_hold_is_released_and_a_deleted_session_is_not_renewed(
    factory: &dyn StoreFactory,
) -> Outcome {
    let h = header("kit-hold-release");
    let a = factory.open();
    let b = factory.open();
    create(&*a, &h);
    let Some(first) = must(a.hold(&h.id, "worker-a", LONG), "the first hold") else {
        return Outcome::Skipped(GRANTS_NO_HOLDS);
    };
    must(a.release(&first), "releasing the first hold");
    let held = must(a.hold(&h.id, "worker-a", LONG), "the hold taken again after its release")
        .unwrap_or_else(|| panic!("a store that granted one hold granted none the second time"));
    assert!(held.token() > first.token(), "a new grant's token must be larger: {held:?} after {first:?}");

    let others = [
        (crate::Hold::new(&h.id, "worker-b", held.token().saturating_add(1), None), "of another holder"),
        (first.clone(), "of the same holder, with the token of its earlier grant"),
        (
            crate::Hold::new(&h.id, "worker-b", first.token(), held.expires_at()),
            "of another holder, with an earlier token",
        ),
    ];
    for (n, (other, what)) in others.iter().enumerate() {
        must(a.release(other), &format!("a release of a hold {what} (not an error)"));
        must_fail(
            b.hold(&h.id, "worker-b", LONG),
            "locked",
            &format!("another store's hold, after a release of a hold {what}"),
        );
        let next = n as u64;
        must_fail(
            b.append(&h.id, &ticks(next..next + 1)),
            "locked",
            &format!("another store's append, after a release of a hold {what}"),
        );
        append(&*a, &h.id, &ticks(next..next + 1));
    }
    let renewed = must(a.renew(&held, LONG), "renewing the current hold after the other releases");
    assert_eq!(renewed.token(), held.token(), "a renewal keeps the token");
    assert_stored(&*b, &h, &ticks(0..3), "after the holder's appends");

    must(a.release(&held), "releasing the current hold");
    let taken = must(b.hold(&h.id, "worker-b", LONG), "another store's hold after the holder's release")
        .unwrap_or_else(|| panic!("a store that granted one hold granted none the second time"));
    append(&*b, &h.id, &ticks(3..4));
    must(b.delete(&h.id), "the holder deleting the session");
    must_fail(b.renew(&taken, LONG), "not-found", "renewing a hold once its session is deleted");
    must_fail(a.renew(&held, LONG), "not-found", "renewing a released hold once its session is deleted");
    must(b.release(&taken), "releasing a hold whose session is gone (changes nothing)");
    must_fail(b.load(&h.id), "not-found", "loading the deleted session");
    Outcome::Ran
}
