//! Fast deserialization of internally tagged enums (`{"type": "...", ...}`).
//!
//! serde's derive for `#[serde(tag = "...")]` buffers every key and value of
//! the object into an intermediate tree, then replays it into the variant:
//! each string is copied twice, and for the stream chunks that make up most
//! of a log that was the largest single cost of loading one (see
//! `docs/performance.md`). Canonical writers put the tag first, so this
//! reads the tag, then continues the *same* map straight into the variant's
//! fields. When the tag is not first it falls back to buffering into a
//! `serde_json` map, so exactly the same documents are accepted either way:
//! unknown keys ignored, duplicate or missing fields refused.
//!
//! `tag_first` instead of `tag` refuses an object whose tag is not first,
//! without buffering: the strict mirrors of [`crate::shape`] use it, as
//! what they accept must have been read by serde's derived visitors
//! throughout, not through a `serde_json::Value` that keeps the last of a
//! key named twice.

/// Implements `Deserialize` for an internally tagged enum, one arm per
/// variant: `"tag" => Variant { fields }` (a struct variant, fields with
/// their serde attributes) or `"tag" => |value: Type| expr` (a newtype
/// variant whose type reads the remaining fields). `tag "key"` reads the
/// tag wherever it stands; `tag_first "key"` only as the first key.
macro_rules! tagged_enum {
    (@tag_anywhere tag) => { true };
    (@tag_anywhere tag_first) => { false };
    ($enum:ident, $order:ident $tag:literal, $what:literal {
        $($name:literal => $($variant:ident { $($(#[$attr:meta])* $field:ident : $ty:ty),* $(,)? })?
                           $(|$v:ident : $vty:ty| $make:expr)? ),* $(,)?
    }) => {
        impl<'de> serde::Deserialize<'de> for $enum {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<$enum, D::Error> {
                struct TaggedVisitor;

                impl TaggedVisitor {
                    fn variant<'de, R: serde::Deserializer<'de>>(tag: &str, rest: R) -> Result<$enum, R::Error> {
                        $(
                            if tag == $name {
                                $(
                                    #[derive(serde::Deserialize)]
                                    struct Fields { $($(#[$attr])* $field: $ty),* }
                                    let Fields { $($field),* } = Fields::deserialize(rest)?;
                                    return Ok($enum::$variant { $($field),* });
                                )?
                                $(
                                    let $v: $vty = serde::Deserialize::deserialize(rest)?;
                                    return Ok($make);
                                )?
                            }
                        )*
                        Err(serde::de::Error::unknown_variant(tag, &[$($name),*]))
                    }
                }

                impl<'de> serde::de::Visitor<'de> for TaggedVisitor {
                    type Value = $enum;

                    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                        write!(f, "{} (an object with a {:?} key)", $what, $tag)
                    }

                    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<$enum, A::Error> {
                        use serde::de::Error as _;
                        let Some(first) = map.next_key::<$crate::tagged::Text<'de>>()? else {
                            return Err(A::Error::missing_field($tag));
                        };
                        if first.as_str() == $tag {
                            let tag = map.next_value::<$crate::tagged::Text<'de>>()?;
                            return TaggedVisitor::variant(tag.as_str(), serde::de::value::MapAccessDeserializer::new(map));
                        }
                        if !$crate::tagged::tagged_enum!(@tag_anywhere $order) {
                            return Err(A::Error::custom(concat!("`", $tag, "` must be the first key")));
                        }
                        // The tag is not first: buffer the object, then read it.
                        let mut object = serde_json::Map::new();
                        object.insert(first.as_str().to_owned(), map.next_value::<serde_json::Value>()?);
                        while let Some((key, value)) = map.next_entry::<String, serde_json::Value>()? {
                            if object.contains_key(&key) {
                                return Err(A::Error::custom(format_args!("duplicate field `{key}`")));
                            }
                            object.insert(key, value);
                        }
                        let tag = match object.remove($tag) {
                            Some(serde_json::Value::String(tag)) => tag,
                            Some(_) => return Err(A::Error::custom(concat!("`", $tag, "` must be a string"))),
                            None => return Err(A::Error::missing_field($tag)),
                        };
                        TaggedVisitor::variant(&tag, serde_json::Value::Object(object)).map_err(A::Error::custom)
                    }
                }

                d.deserialize_map(TaggedVisitor)
            }
        }
    };
}

pub(crate) use tagged_enum;

/// A string read from the input: borrowed when it holds no escapes, which
/// for keys and tags is always. (`Cow<str>` would not do: serde's impl for
/// it always allocates.)
pub(crate) enum Text<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Text<'_> {
    pub(crate) fn as_str(&self) -> &str {
        match self {
            Text::Borrowed(s) => s,
            Text::Owned(s) => s,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Text<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Text<'de>, D::Error> {
        struct TextVisitor;
        impl<'de> serde::de::Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(self, s: &'de str) -> Result<Text<'de>, E> {
                Ok(Text::Borrowed(s))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Text<'de>, E> {
                Ok(Text::Owned(s.to_owned()))
            }
            fn visit_string<E: serde::de::Error>(self, s: String) -> Result<Text<'de>, E> {
                Ok(Text::Owned(s))
            }
        }
        d.deserialize_str(TextVisitor)
    }
}
