//! A plain WIT component: it exports the `kinds` interface of ordinary typed functions and
//! imports nothing of Cordon. Cordon serves each function as a tool (`kinds.negate`, ...),
//! its input schema derived from the WIT types.

wit_bindgen::generate!({ path: "wit", world: "plain" });

use exports::cordon_examples::plain::kinds::{Color, Guest, Permissions, Person, Point, Shape};

struct Kinds;

impl Guest for Kinds {
    fn negate(value: bool) -> bool {
        !value
    }

    #[allow(clippy::too_many_arguments)]
    fn widths(
        a: i8,
        b: u8,
        c: i16,
        d: u16,
        e: i32,
        f: u32,
        g: i64,
        h: u64,
    ) -> (i8, u8, i16, u16, i32, u32, i64, u64) {
        (a, b, c, d, e, f, g, h)
    }

    fn halve(single: f32, double: f64) -> (f32, f64) {
        (single / 2.0, double / 2.0)
    }

    fn next_char(c: char) -> char {
        char::from_u32(c as u32 + 1).unwrap_or(c)
    }

    fn greet(who: Person) -> String {
        format!("Hello, {}!", who.nickname.unwrap_or(who.name))
    }

    fn sum(values: Vec<i32>) -> i64 {
        values.into_iter().map(i64::from).sum()
    }

    fn first_word(text: String) -> Option<String> {
        text.split_whitespace().next().map(str::to_owned)
    }

    fn maybe_double(value: Option<u32>) -> Option<u32> {
        value.map(|value| value.wrapping_mul(2))
    }

    fn divide(a: i32, b: i32) -> Result<i32, String> {
        a.checked_div(b).ok_or_else(|| format!("cannot divide {a} by {b}"))
    }

    fn check_name(name: String) -> Result<(), String> {
        if name.is_empty() { Err("a name cannot be empty".to_owned()) } else { Ok(()) }
    }

    fn swap(pair: (String, u8)) -> (u8, String) {
        (pair.1, pair.0)
    }

    fn move_right(p: Point, dx: i32) -> Point {
        Point { x: p.x.wrapping_add(dx), y: p.y }
    }

    fn area(s: Shape) -> f64 {
        match s {
            Shape::Circle(radius) => std::f64::consts::PI * radius * radius,
            Shape::Rectangle((width, height)) => width * height,
            Shape::Dot => 0.0,
        }
    }

    fn next_color(c: Color) -> Color {
        match c {
            Color::Red => Color::Green,
            Color::Green => Color::Blue,
            Color::Blue => Color::Red,
        }
    }

    fn toggle_write(p: Permissions) -> Permissions {
        p ^ Permissions::WRITE
    }

    fn spin() {
        let mut n = 0u64;
        loop {
            n = std::hint::black_box(n.wrapping_add(1));
        }
    }
}

export!(Kinds);
