//! The words of enum-like settings, defined once per setting: each enum lists its values and
//! their spellings ([`Word`]), and parsing, printing, clap's `ValueEnum` and the "expected a,
//! b or c" of an error all come from that list. Flags, the YAML config and the bench read the
//! same words.

/// A closed set of words, one per value of an enum-like setting.
pub trait Word: Copy + 'static {
    /// What the setting is called in messages (`on_store_error`, `rate limit unit`).
    const WHAT: &'static str;
    /// Every value, in the order messages list them.
    const ALL: &'static [Self];
    /// Whether a word is matched regardless of case (envoyproxy/ratelimit's units are).
    const ANY_CASE: bool = false;

    /// The spelling of this value.
    fn word(self) -> &'static str;
}

/// A word that names no value of the setting.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} '{given}' (expected {expected})")]
pub struct UnknownWord {
    pub what: &'static str,
    pub given: String,
    pub expected: String,
}

/// The value `s` names.
pub fn parse<W: Word>(s: &str) -> Result<W, UnknownWord> {
    W::ALL
        .iter()
        .copied()
        .find(|w| {
            if W::ANY_CASE {
                w.word().eq_ignore_ascii_case(s)
            } else {
                w.word() == s
            }
        })
        .ok_or_else(|| UnknownWord {
            what: W::WHAT,
            given: crate::excerpt::excerpt(s).into_owned(),
            expected: one_of::<W>(),
        })
}

/// Every word of the setting: `a, b or c` (lower case where case does not matter).
pub fn one_of<W: Word>() -> String {
    let words: Vec<String> = W::ALL
        .iter()
        .map(|w| {
            if W::ANY_CASE {
                w.word().to_ascii_lowercase()
            } else {
                w.word().to_string()
            }
        })
        .collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Defines an enum of words: the enum, its [`Word`] list, `FromStr`, `Display` and clap's
/// `ValueEnum` (each word's doc comment is its help in `--help`).
macro_rules! words {
    (
        $(#[$meta:meta])*
        $vis:vis enum $T:ident as $what:literal {
            $( $(#[doc = $doc:literal])* $V:ident = $word:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $T {
            $( $(#[doc = $doc])* $V, )+
        }

        impl $crate::rules::vocab::Word for $T {
            const WHAT: &'static str = $what;
            const ALL: &'static [Self] = &[$($T::$V),+];

            fn word(self) -> &'static str {
                match self {
                    $($T::$V => $word,)+
                }
            }
        }

        impl std::str::FromStr for $T {
            type Err = $crate::rules::vocab::UnknownWord;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $crate::rules::vocab::parse(s)
            }
        }

        impl std::fmt::Display for $T {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str($crate::rules::vocab::Word::word(*self))
            }
        }

        impl clap::ValueEnum for $T {
            fn value_variants<'a>() -> &'a [Self] {
                <$T as $crate::rules::vocab::Word>::ALL
            }

            fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
                let help: &'static str = match self {
                    $($T::$V => concat!($($doc),*),)+
                };
                Some(
                    clap::builder::PossibleValue::new($crate::rules::vocab::Word::word(*self))
                        .help(help.trim()),
                )
            }
        }
    };
}

pub(crate) use words;

// The words of types that live with their algorithms (which import nothing of `rules`).

impl Word for crate::algorithm::Algorithm {
    const WHAT: &'static str = "algorithm";
    const ALL: &'static [Self] = &Self::ALL;

    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Word for crate::model::Unit {
    const WHAT: &'static str = "rate limit unit";
    const ALL: &'static [Self] = &Self::ALL;
    const ANY_CASE: bool = true;

    fn word(self) -> &'static str {
        self.as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Algorithm;
    use crate::model::Unit;

    #[test]
    fn parse_and_list() {
        assert_eq!(parse::<Unit>("Minute"), Ok(Unit::Minute));
        assert_eq!(parse::<Algorithm>("gcra"), Ok(Algorithm::Gcra));
        assert_eq!(
            parse::<Algorithm>("GCRA").unwrap_err().to_string(),
            "invalid algorithm 'GCRA' (expected fixed_window, sliding_window, sliding_log, \
             token_bucket, leaky_bucket, gcra, distinct or concurrency)"
        );
        assert_eq!(
            one_of::<Unit>(),
            "second, minute, hour, day, week, month or year"
        );
    }

    #[test]
    fn every_word_round_trips() {
        for a in Algorithm::ALL {
            assert_eq!(parse::<Algorithm>(a.word()), Ok(a));
        }
        assert!(parse::<Algorithm>("Fixed_Window").is_err());
        for u in Unit::ALL {
            assert_eq!(parse::<Unit>(&u.word().to_lowercase()), Ok(u));
        }
        assert!(parse::<Unit>("fortnight").is_err());
    }
}
