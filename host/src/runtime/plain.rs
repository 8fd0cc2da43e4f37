//! # Plain components: exported typed functions served as tools
//!
//! A component that does not implement the `cordon:tool/plugin` world but exports ordinary
//! typed functions (wassette serves such components) is served too. This module owns all
//! that is particular to them:
//!
//! - **Which functions are tools.** Every function the component exports at its top level
//!   is a tool named after it (`fetch`); every function of an interface it exports is a
//!   tool named `<interface>.<function>`, the interface's name taken without its package
//!   and version (`local:time-server/time@0.1.0` → `time.get-current-time`). WIT names are
//!   kebab-case, so tool names stay within MCP's `A-Z a-z 0-9 _ - .`; two exported
//!   interfaces of the same name (from different packages) are refused, as their tools
//!   would clash. Left out, with a warning: exports of `wasi:` interfaces (entry points of
//!   other worlds, such as `wasi:cli/run`), resource methods and functions whose types hold
//!   resources, streams or futures (nothing a JSON client could pass), and async functions.
//! - **Schemas.** A tool's input schema is an object of the function's parameters, derived
//!   from their WIT types ([`schema_of`]): integers carry their ranges, `char` is a one-
//!   character string, a record is an object of its fields, a tuple a fixed-length array,
//!   a variant (and a `result`) an object with one key, the case (`{"ok": 1}`), or the
//!   case's name alone when it has no payload, an enum a string of its cases, flags an
//!   array of the names set, an `option` the inner type or `null` (a parameter or field
//!   of an `option` type may be left out). The result is `{"result": value}` in the same
//!   encoding (its output schema); a top-level `result<T, E>` is unwrapped: `ok` gives
//!   `T`, `err` an error result.
//! - **Descriptions.** WIT doc comments, when the component carries them: the
//!   `package-docs` custom section that `wit-component` writes when it encodes a WIT
//!   package (found at any depth of the component). A function without docs gets no
//!   description.
//! - **Calls.** The arguments (checked against the schema before the call starts) become
//!   `Val`s ([`to_val`], which checks again and names the path of what it refuses); the
//!   function is called dynamically; its result becomes a `call-result` as a Cordon tool
//!   would return it, so that everything after the guest returns (limits, output checks,
//!   rendering) is shared. How a call is stopped is `call.rs`'s, as for any component; a
//!   plain component has no `cleanup` to run after a stop.

use std::collections::{BTreeMap, HashMap};

use serde::Deserialize;
use serde_json::{Map, Value, json};
use wasmtime::Engine;
use wasmtime::component::types::{ComponentFunc, ComponentItem};
use wasmtime::component::{Component, ComponentExportIndex, Type, Val};

use super::bindings::{CallResult, Content};
use super::component::{MAX_SCHEMA_BYTES, ToolSpec};

/// A plain component's functions, by tool name.
pub(crate) struct PlainFunctions(HashMap<String, PlainFunction>);

/// One exported function, as a tool.
pub(crate) struct PlainFunction {
    /// Where the instance exports it.
    index: ComponentExportIndex,
    params: Vec<(String, Type)>,
    result: Option<Type>,
}

/// What a plain component offers.
pub(crate) struct Discovered {
    pub(crate) tools: Vec<ToolSpec>,
    pub(crate) functions: PlainFunctions,
    /// Exports left out, each with why.
    pub(crate) warnings: Vec<String>,
}

/// The tools of a plain `component` (whose bytes are `bytes`, for its docs). Fails when two
/// tools would have the same name or no function is left to serve.
pub(crate) fn discover(engine: &Engine, component: &Component, bytes: &[u8]) -> Result<Discovered, String> {
    let docs = PackageDocs::find(bytes);
    let mut found =
        Discovered { tools: Vec::new(), functions: PlainFunctions(HashMap::new()), warnings: Vec::new() };
    let mut interfaces: HashMap<String, String> = HashMap::new();
    let kind = component.component_type();
    for (export, item) in kind.exports(engine) {
        match item.ty {
            ComponentItem::ComponentFunc(func) => {
                let index = component.get_export_index(None, export).expect("an export of the component");
                let description = docs.function(None, export);
                found.add(export.to_owned(), export, index, &func, description);
            }
            ComponentItem::ComponentInstance(instance) => {
                if export.starts_with("wasi:") {
                    found.warnings.push(format!(
                        "export {export} left out: a `wasi:` interface is an entry point of another world, not a tool"
                    ));
                    continue;
                }
                let short = short_interface_name(export);
                if let Some(other) = interfaces.insert(short.to_owned(), export.to_owned()) {
                    return Err(format!(
                        "it exports two interfaces named {short:?} ({other} and {export}): their tools would \
                         have the same names"
                    ));
                }
                let instance_index =
                    component.get_export_index(None, export).expect("an export of the component");
                for (name, function) in instance.exports(engine) {
                    let ComponentItem::ComponentFunc(func) = function.ty else { continue };
                    let qualified = format!("{export}#{name}");
                    if name.starts_with('[') {
                        found.warnings.push(format!(
                            "function {qualified} left out: resource methods need a resource, which a JSON \
                             client cannot pass"
                        ));
                        continue;
                    }
                    let index = component
                        .get_export_index(Some(&instance_index), name)
                        .expect("an export of the instance");
                    let description = docs.function(Some(short), name);
                    found.add(format!("{short}.{name}"), &qualified, index, &func, description);
                }
            }
            _ => {}
        }
    }
    if found.tools.is_empty() {
        let mut problem =
            "does not implement the cordon:tool@0.1.0 `plugin` world (export `cordon:tool/tool`) \
                           and exports no function to serve as a plain component's tool"
                .to_owned();
        if !found.warnings.is_empty() {
            problem.push_str(&format!(" ({})", found.warnings.join("; ")));
        }
        problem.push_str(
            "; a Rust tool exports it with `cordon_guest::export_plugin!(YourPlugin);` at its crate root",
        );
        return Err(problem);
    }
    Ok(found)
}

/// `ns:pkg/name@1.0.0` → `name`; a plain export name stays as it is.
fn short_interface_name(export: &str) -> &str {
    let unversioned = export.split('@').next().unwrap_or(export);
    unversioned.rsplit('/').next().unwrap_or(unversioned)
}

impl Discovered {
    fn add(
        &mut self,
        tool: String,
        qualified: &str,
        index: ComponentExportIndex,
        func: &ComponentFunc,
        description: Option<String>,
    ) {
        let looked_at = self.tools.len() + self.warnings.len();
        if looked_at >= MAX_FUNCTIONS {
            if looked_at == MAX_FUNCTIONS {
                self.warnings.push(format!("more than {MAX_FUNCTIONS} functions: the rest are left out"));
            }
            return;
        }
        match function_spec(&tool, index, func, description) {
            Ok((spec, function)) => {
                self.functions.0.insert(tool, function);
                self.tools.push(spec);
            }
            Err(why) => self.warnings.push(format!("function {qualified} left out: {why}")),
        }
    }
}

/// Why a type cannot be served.
#[derive(Debug)]
struct Unsupported(String);

/// The most parts (types, each a schema object) a function's schemas may take together:
/// each is at least about ten bytes of JSON, so past this they would be past
/// [`MAX_SCHEMA_BYTES`] anyway, and are refused before they are built.
const SCHEMA_NODES: usize = MAX_SCHEMA_BYTES / 10;

/// The most functions a plain component's discovery looks at; the rest are left out.
const MAX_FUNCTIONS: usize = 1024;

fn function_spec(
    tool: &str,
    index: ComponentExportIndex,
    func: &ComponentFunc,
    description: Option<String>,
) -> Result<(ToolSpec, PlainFunction), String> {
    if func.async_() {
        return Err("async functions are not supported yet".into());
    }
    let params: Vec<(String, Type)> = func.params().map(|(name, ty)| (name.to_owned(), ty)).collect();
    let mut results = func.results();
    let result = results.next();
    if results.next().is_some() {
        return Err("it returns more than one value".into());
    }
    let mut properties = Map::new();
    let mut required = Vec::new();
    // One budget for the whole function: its schemas together are bounded.
    let mut nodes = SCHEMA_NODES;
    let nodes = &mut nodes;
    for (name, ty) in &params {
        let schema = schema_of(ty, nodes).map_err(|Unsupported(why)| format!("parameter {name:?}: {why}"))?;
        if !matches!(ty, Type::Option(_)) {
            required.push(Value::String(name.clone()));
        }
        properties.insert(name.clone(), schema);
    }
    let input_schema = json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    });
    let output_schema = match payload_type(result.as_ref()) {
        Some(ty) => Some(json!({
            "type": "object",
            "properties": {"result": schema_of(&ty, nodes).map_err(|Unsupported(why)| format!("its result: {why}"))?},
            "required": ["result"],
            "additionalProperties": false,
        })),
        None => {
            if let Some(Type::Result(result)) = &result
                && let Some(err) = result.err()
            {
                schema_of(&err, nodes).map_err(|Unsupported(why)| format!("its error: {why}"))?;
            }
            None
        }
    };
    for schema in std::iter::once(&input_schema).chain(&output_schema) {
        let bytes = schema.to_string().len();
        if bytes > MAX_SCHEMA_BYTES {
            return Err(format!("its schema is {bytes} bytes, more than the limit of {MAX_SCHEMA_BYTES}"));
        }
    }
    let spec = ToolSpec {
        name: tool.to_owned(),
        title: None,
        description: description.unwrap_or_default(),
        input_schema,
        output_schema,
        annotations: None,
        requires: Vec::new(),
        param_headers: Vec::new(),
    };
    Ok((spec, PlainFunction { index, params, result }))
}

/// The type whose value a successful call returns as `{"result": …}`: the function's
/// result, or the `ok` of a top-level `result`; none when there is no value.
fn payload_type(result: Option<&Type>) -> Option<Type> {
    match result? {
        Type::Result(result) => result.ok(),
        other => Some(other.clone()),
    }
}

/// The JSON Schema of values of `ty`, in the encoding of [`to_val`] and [`to_json`].
fn schema_of(ty: &Type, nodes: &mut usize) -> Result<Value, Unsupported> {
    // A type can name another many times over (a tuple of two of a tuple of two of …), so
    // its schema can grow exponentially in the bytes that declare it: counted as built.
    *nodes = nodes.checked_sub(1).ok_or_else(|| {
        Unsupported(format!("its type is too large to describe (more than {SCHEMA_NODES} parts)"))
    })?;
    fn integer(min: i128, max: i128) -> Value {
        json!({"type": "integer", "minimum": number(min), "maximum": number(max)})
    }
    fn number(n: i128) -> Value {
        match (i64::try_from(n), u64::try_from(n)) {
            (Ok(n), _) => Value::from(n),
            (_, Ok(n)) => Value::from(n),
            _ => unreachable!("integer bounds fit 64 bits"),
        }
    }
    fn case(name: &str, payload: Option<Value>) -> Value {
        match payload {
            Some(schema) => json!({
                "type": "object",
                "properties": {name: schema},
                "required": [name],
                "additionalProperties": false,
            }),
            None => json!({"const": name}),
        }
    }
    Ok(match ty {
        Type::Bool => json!({"type": "boolean"}),
        Type::S8 => integer(i8::MIN.into(), i8::MAX.into()),
        Type::U8 => integer(0, u8::MAX.into()),
        Type::S16 => integer(i16::MIN.into(), i16::MAX.into()),
        Type::U16 => integer(0, u16::MAX.into()),
        Type::S32 => integer(i32::MIN.into(), i32::MAX.into()),
        Type::U32 => integer(0, u32::MAX.into()),
        Type::S64 => integer(i64::MIN.into(), i64::MAX.into()),
        Type::U64 => integer(0, u64::MAX.into()),
        Type::Float32 | Type::Float64 => json!({"type": "number"}),
        Type::Char => json!({"type": "string", "minLength": 1, "maxLength": 1}),
        Type::String => json!({"type": "string"}),
        Type::List(list) => json!({"type": "array", "items": schema_of(&list.ty(), nodes)?}),
        Type::FixedLengthList(list) => json!({
            "type": "array",
            "items": schema_of(&list.ty(), nodes)?,
            "minItems": list.len(),
            "maxItems": list.len(),
        }),
        Type::Map(map) if map.key() == Type::String => {
            json!({"type": "object", "additionalProperties": schema_of(&map.value(), nodes)?})
        }
        Type::Map(map) => json!({
            "type": "array",
            "items": {
                "type": "array",
                "prefixItems": [schema_of(&map.key(), nodes)?, schema_of(&map.value(), nodes)?],
                "items": false,
                "minItems": 2,
            },
        }),
        Type::Record(record) => {
            let mut properties = Map::new();
            let mut required = Vec::new();
            for field in record.fields() {
                if !matches!(field.ty, Type::Option(_)) {
                    required.push(Value::String(field.name.to_owned()));
                }
                properties.insert(field.name.to_owned(), schema_of(&field.ty, nodes)?);
            }
            json!({"type": "object", "properties": properties, "required": required, "additionalProperties": false})
        }
        Type::Tuple(tuple) => {
            let items = tuple.types().map(|ty| schema_of(&ty, nodes)).collect::<Result<Vec<_>, _>>()?;
            let len = items.len();
            json!({"type": "array", "prefixItems": items, "items": false, "minItems": len})
        }
        Type::Variant(variant) => {
            let cases = variant
                .cases()
                .map(|c| Ok(case(c.name, c.ty.as_ref().map(|ty| schema_of(ty, nodes)).transpose()?)))
                .collect::<Result<Vec<_>, _>>()?;
            json!({"oneOf": cases})
        }
        Type::Result(result) => {
            let mut payload = |ty: Option<Type>| ty.as_ref().map(|ty| schema_of(ty, nodes)).transpose();
            json!({"oneOf": [case("ok", payload(result.ok())?), case("err", payload(result.err())?)]})
        }
        Type::Enum(cases) => json!({"type": "string", "enum": cases.names().collect::<Vec<_>>()}),
        Type::Flags(flags) => json!({
            "type": "array",
            "items": {"type": "string", "enum": flags.names().collect::<Vec<_>>()},
            "uniqueItems": true,
        }),
        Type::Option(option) => {
            let inner = option.ty();
            let schema = schema_of(&inner, nodes)?;
            match (&inner, schema) {
                // `null` is the outer `none`: an inner `none` is `{"some": null}`.
                (Type::Option(_), schema) => json!({"anyOf": [{"type": "null"}, case("some", Some(schema))]}),
                (_, Value::Object(mut schema)) if schema.get("type").is_some_and(Value::is_string) => {
                    let kind = schema.remove("type").expect("checked");
                    schema.insert("type".into(), json!([kind, "null"]));
                    if let Some(Value::Array(cases)) = schema.get_mut("enum") {
                        cases.push(Value::Null);
                    }
                    Value::Object(schema)
                }
                (_, schema) => json!({"anyOf": [{"type": "null"}, schema]}),
            }
        }
        Type::Own(_) | Type::Borrow(_) => return Err(Unsupported("it holds a resource".into())),
        Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(Unsupported("it holds a future, stream or error context".into()));
        }
    })
}

/// Why arguments could not become a function's parameters: the JSON Pointer of the value
/// refused, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {problem}", if path.is_empty() { "(root)" } else { path })]
pub struct ArgumentError {
    pub path: String,
    pub problem: String,
}

fn refuse(path: &str, problem: impl Into<String>) -> ArgumentError {
    ArgumentError { path: path.to_owned(), problem: problem.into() }
}

/// A JSON Pointer token (RFC 6901).
fn token(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

/// What a JSON value is, for a refusal.
fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The parameters of `function` from a call's `arguments` (a JSON object).
pub(crate) fn to_params(function: &PlainFunction, arguments: &Value) -> Result<Vec<Val>, ArgumentError> {
    let Value::Object(object) = arguments else { return Err(refuse("", "expected an object")) };
    if let Some(unknown) = object.keys().find(|key| !function.params.iter().any(|(name, _)| name == *key)) {
        return Err(refuse(&format!("/{}", token(unknown)), "no such parameter"));
    }
    function
        .params
        .iter()
        .map(|(name, ty)| {
            let path = format!("/{}", token(name));
            match (object.get(name), ty) {
                (None, Type::Option(_)) => Ok(Val::Option(None)),
                (None, _) => Err(refuse(&path, "missing: this parameter is required")),
                (Some(value), ty) => to_val(value, ty, &path),
            }
        })
        .collect()
}

/// `value` as a value of `ty`; `path` is where `value` sits in the arguments.
fn to_val(value: &Value, ty: &Type, path: &str) -> Result<Val, ArgumentError> {
    fn int<T: TryFrom<i128>>(value: &Value, path: &str, min: i128, max: i128) -> Result<T, ArgumentError> {
        let wide = match value {
            Value::Number(n) => n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from)),
            _ => None,
        };
        wide.and_then(|n| T::try_from(n).ok())
            .ok_or_else(|| refuse(path, format!("expected an integer from {min} to {max}, got {value}")))
    }
    let expected = |what: &str| refuse(path, format!("expected {what}, got {}", kind_of(value)));
    let at = |name: &str| format!("{path}/{}", token(name));
    Ok(match ty {
        Type::Bool => Val::Bool(value.as_bool().ok_or_else(|| expected("a boolean"))?),
        Type::S8 => Val::S8(int(value, path, i8::MIN.into(), i8::MAX.into())?),
        Type::U8 => Val::U8(int(value, path, 0, u8::MAX.into())?),
        Type::S16 => Val::S16(int(value, path, i16::MIN.into(), i16::MAX.into())?),
        Type::U16 => Val::U16(int(value, path, 0, u16::MAX.into())?),
        Type::S32 => Val::S32(int(value, path, i32::MIN.into(), i32::MAX.into())?),
        Type::U32 => Val::U32(int(value, path, 0, u32::MAX.into())?),
        Type::S64 => Val::S64(int(value, path, i64::MIN.into(), i64::MAX.into())?),
        Type::U64 => Val::U64(int(value, path, 0, u64::MAX.into())?),
        Type::Float32 => Val::Float32(value.as_f64().ok_or_else(|| expected("a number"))? as f32),
        Type::Float64 => Val::Float64(value.as_f64().ok_or_else(|| expected("a number"))?),
        Type::Char => {
            let text = value.as_str().ok_or_else(|| expected("a string of one character"))?;
            let mut chars = text.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => Val::Char(c),
                _ => {
                    return Err(refuse(
                        path,
                        format!("expected one character, got {} characters", text.chars().count()),
                    ));
                }
            }
        }
        Type::String => Val::String(value.as_str().ok_or_else(|| expected("a string"))?.to_owned()),
        Type::List(list) => {
            let items = value.as_array().ok_or_else(|| expected("an array"))?;
            let ty = list.ty();
            Val::List(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| to_val(item, &ty, &at(&i.to_string())))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::FixedLengthList(list) => {
            let items = value.as_array().ok_or_else(|| expected("an array"))?;
            if items.len() != list.len() as usize {
                return Err(refuse(path, format!("expected {} items, got {}", list.len(), items.len())));
            }
            let ty = list.ty();
            Val::FixedLengthList(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| to_val(item, &ty, &at(&i.to_string())))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Map(map) if map.key() == Type::String => {
            let object = value.as_object().ok_or_else(|| expected("an object"))?;
            let ty = map.value();
            Val::Map(
                object
                    .iter()
                    .map(|(key, item)| Ok((Val::String(key.clone()), to_val(item, &ty, &at(key))?)))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Map(map) => {
            let pairs = value.as_array().ok_or_else(|| expected("an array of [key, value] pairs"))?;
            let (key_ty, value_ty) = (map.key(), map.value());
            Val::Map(
                pairs
                    .iter()
                    .enumerate()
                    .map(|(i, pair)| match pair.as_array().map(Vec::as_slice) {
                        Some([key, item]) => {
                            let here = at(&i.to_string());
                            Ok((
                                to_val(key, &key_ty, &format!("{here}/0"))?,
                                to_val(item, &value_ty, &format!("{here}/1"))?,
                            ))
                        }
                        _ => Err(refuse(&at(&i.to_string()), "expected a [key, value] pair")),
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Record(record) => {
            let object = value.as_object().ok_or_else(|| expected("an object"))?;
            if let Some(unknown) = object.keys().find(|key| !record.fields().any(|field| field.name == *key))
            {
                return Err(refuse(&at(unknown), "no such field"));
            }
            Val::Record(
                record
                    .fields()
                    .map(|field| {
                        let here = at(field.name);
                        let val = match (object.get(field.name), &field.ty) {
                            (None, Type::Option(_)) => Val::Option(None),
                            (None, _) => return Err(refuse(&here, "missing: this field is required")),
                            (Some(item), ty) => to_val(item, ty, &here)?,
                        };
                        Ok((field.name.to_owned(), val))
                    })
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Tuple(tuple) => {
            let items = value.as_array().ok_or_else(|| expected("an array"))?;
            if items.len() != tuple.types().len() {
                return Err(refuse(
                    path,
                    format!("expected {} items, got {}", tuple.types().len(), items.len()),
                ));
            }
            Val::Tuple(
                tuple
                    .types()
                    .zip(items)
                    .enumerate()
                    .map(|(i, (ty, item))| to_val(item, &ty, &at(&i.to_string())))
                    .collect::<Result<_, _>>()?,
            )
        }
        Type::Variant(variant) => {
            let cases: Vec<(String, Option<Type>)> =
                variant.cases().map(|c| (c.name.to_owned(), c.ty)).collect();
            let (name, payload) = tagged(value, path, &cases)?;
            Val::Variant(name, payload.map(Box::new))
        }
        Type::Result(result) => {
            let cases = [("ok".to_owned(), result.ok()), ("err".to_owned(), result.err())];
            let (name, payload) = tagged(value, path, &cases)?;
            let payload = payload.map(Box::new);
            Val::Result(if name == "ok" { Ok(payload) } else { Err(payload) })
        }
        Type::Enum(cases) => {
            let name = value.as_str().ok_or_else(|| expected("a string"))?;
            if !cases.names().any(|case| case == name) {
                let names: Vec<&str> = cases.names().collect();
                return Err(refuse(path, format!("{name:?} is not one of {}", names.join(", "))));
            }
            Val::Enum(name.to_owned())
        }
        Type::Flags(flags) => {
            let items = value.as_array().ok_or_else(|| expected("an array of flag names"))?;
            let mut set: Vec<String> = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let here = at(&i.to_string());
                let name = item
                    .as_str()
                    .ok_or_else(|| refuse(&here, format!("expected a flag name, got {}", kind_of(item))))?;
                if !flags.names().any(|flag| flag == name) {
                    let names: Vec<&str> = flags.names().collect();
                    return Err(refuse(&here, format!("{name:?} is not one of {}", names.join(", "))));
                }
                if set.iter().any(|seen| seen == name) {
                    return Err(refuse(&here, format!("{name:?} is set twice")));
                }
                set.push(name.to_owned());
            }
            Val::Flags(set)
        }
        Type::Option(option) => match (value, option.ty()) {
            (Value::Null, _) => Val::Option(None),
            (value, inner @ Type::Option(_)) => {
                let (_, payload) = tagged(value, path, &[("some".to_owned(), Some(inner))])?;
                Val::Option(payload.map(Box::new))
            }
            (value, inner) => Val::Option(Some(Box::new(to_val(value, &inner, path)?))),
        },
        Type::Own(_) | Type::Borrow(_) | Type::Future(_) | Type::Stream(_) | Type::ErrorContext => {
            return Err(refuse(path, "this type cannot be passed from JSON"));
        }
    })
}

/// A case of a variant-like type: `"name"` for a case without payload, `{"name": payload}`.
fn tagged(
    value: &Value,
    path: &str,
    cases: &[(String, Option<Type>)],
) -> Result<(String, Option<Val>), ArgumentError> {
    let names = || cases.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join(", ");
    let (name, payload) = match value {
        Value::String(name) => (name, None),
        Value::Object(object) if object.len() == 1 => {
            let (name, payload) = object.iter().next().expect("one entry");
            (name, Some(payload))
        }
        _ => {
            return Err(refuse(
                path,
                format!(
                    "expected a case name, or an object with one key, the case ({}), got {}",
                    names(),
                    kind_of(value)
                ),
            ));
        }
    };
    let Some((_, ty)) = cases.iter().find(|(case, _)| case == name) else {
        return Err(refuse(path, format!("{name:?} is not one of {}", names())));
    };
    match (ty, payload) {
        (None, None) => Ok((name.clone(), None)),
        (Some(ty), Some(payload)) => {
            Ok((name.clone(), Some(to_val(payload, ty, &format!("{path}/{}", token(name)))?)))
        }
        (None, Some(_)) => Err(refuse(path, format!("case {name:?} has no payload: pass \"{name}\" alone"))),
        (Some(_), None) => {
            Err(refuse(path, format!("case {name:?} needs a payload: pass {{\"{name}\": …}}")))
        }
    }
}

/// `val` as JSON, in the encoding of [`schema_of`].
fn to_json(val: &Val) -> Value {
    let case = |name: &str, payload: &Option<Box<Val>>| match payload {
        Some(payload) => json!({name: to_json(payload)}),
        None => Value::String(name.to_owned()),
    };
    match val {
        Val::Bool(b) => Value::Bool(*b),
        Val::S8(n) => json!(n),
        Val::U8(n) => json!(n),
        Val::S16(n) => json!(n),
        Val::U16(n) => json!(n),
        Val::S32(n) => json!(n),
        Val::U32(n) => json!(n),
        Val::S64(n) => json!(n),
        Val::U64(n) => json!(n),
        // NaN and infinities have no JSON number: `null`, as serde_json writes them.
        Val::Float32(n) => json!(n),
        Val::Float64(n) => json!(n),
        Val::Char(c) => Value::String(c.to_string()),
        Val::String(s) => Value::String(s.clone()),
        Val::List(items) | Val::FixedLengthList(items) | Val::Tuple(items) => {
            Value::Array(items.iter().map(to_json).collect())
        }
        Val::Map(pairs) if pairs.iter().all(|(key, _)| matches!(key, Val::String(_))) => Value::Object(
            pairs
                .iter()
                .map(|(key, value)| match key {
                    Val::String(key) => (key.clone(), to_json(value)),
                    _ => unreachable!("checked"),
                })
                .collect(),
        ),
        Val::Map(pairs) => {
            Value::Array(pairs.iter().map(|(key, value)| json!([to_json(key), to_json(value)])).collect())
        }
        Val::Record(fields) => {
            Value::Object(fields.iter().map(|(name, value)| (name.clone(), to_json(value))).collect())
        }
        Val::Variant(name, payload) => case(name, payload),
        Val::Enum(name) => Value::String(name.clone()),
        Val::Option(None) => Value::Null,
        Val::Option(Some(inner)) => match **inner {
            Val::Option(_) => json!({"some": to_json(inner)}),
            _ => to_json(inner),
        },
        Val::Result(Ok(payload)) => case("ok", payload),
        Val::Result(Err(payload)) => case("err", payload),
        Val::Flags(names) => json!(names),
        Val::Resource(_) | Val::Future(_) | Val::Stream(_) | Val::ErrorContext(_) => {
            unreachable!("functions with such types are not served")
        }
    }
}

/// A value as a client reads it: a string as it is, anything else as JSON.
fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

impl PlainFunctions {
    pub(crate) fn get(&self, tool: &str) -> Option<&PlainFunction> {
        self.0.get(tool)
    }
}

impl PlainFunction {
    /// Call the function in `instance` with `arguments` (JSON text, already checked against
    /// its schema); its return becomes a Cordon `call-result`. Arguments it still refuses
    /// are an `err`, which the client sees as an error result.
    pub(crate) async fn call(
        &self,
        mut store: impl wasmtime::AsContextMut<Data: Send>,
        instance: &wasmtime::component::Instance,
        arguments: &str,
    ) -> wasmtime::Result<Result<CallResult, String>> {
        let arguments: Value = match serde_json::from_str(arguments) {
            Ok(arguments) => arguments,
            Err(error) => return Ok(Err(format!("the arguments are not JSON: {error}"))),
        };
        let params = match to_params(self, &arguments) {
            Ok(params) => params,
            Err(error) => return Ok(Err(format!("invalid arguments: {error}"))),
        };
        let func = instance
            .get_func(&mut store, self.index)
            .ok_or_else(|| wasmtime::format_err!("the instance does not export the function"))?;
        let mut results = vec![Val::Bool(false); usize::from(self.result.is_some())];
        func.call_async(&mut store, &params, &mut results).await?;
        Ok(Ok(render(results.pop())))
    }
}

/// A function's return as a `call-result`: the value as text and as `{"result": value}`;
/// a top-level `result`'s `err` as an error result.
fn render(returned: Option<Val>) -> CallResult {
    let done = |value: Option<Value>| CallResult {
        content: value.iter().map(|value| Content::Text(text_of(value))).collect(),
        structured: value.map(|value| json!({"result": value}).to_string()),
        is_error: false,
    };
    match returned {
        None => done(None),
        Some(Val::Result(Ok(payload))) => done(payload.map(|payload| to_json(&payload))),
        Some(Val::Result(Err(payload))) => CallResult {
            content: vec![Content::Text(match payload {
                Some(payload) => text_of(&to_json(&payload)),
                None => "the function returned an error".to_owned(),
            })],
            structured: None,
            is_error: true,
        },
        Some(value) => done(Some(to_json(&value))),
    }
}

/// The doc comments of a component's WIT package(s), from `package-docs` custom sections
/// (wit-parser's format: a version byte, then JSON). Lenient: a section it cannot read is
/// ignored, as docs are a nicety.
#[derive(Default)]
struct PackageDocs(Vec<PackageMetadata>);

#[derive(Deserialize, Default)]
struct PackageMetadata {
    #[serde(default)]
    worlds: BTreeMap<String, WorldMetadata>,
    #[serde(default)]
    interfaces: BTreeMap<String, InterfaceMetadata>,
}

#[derive(Deserialize, Default)]
struct WorldMetadata {
    /// Imports, or exports that no import shares a name with.
    #[serde(default)]
    funcs: BTreeMap<String, FunctionMetadata>,
    #[serde(default)]
    func_exports: BTreeMap<String, FunctionMetadata>,
    #[serde(default, rename = "interfaces")]
    inline_interfaces: BTreeMap<String, InterfaceMetadata>,
    #[serde(default)]
    interface_exports: BTreeMap<String, InterfaceMetadata>,
}

#[derive(Deserialize, Default)]
struct InterfaceMetadata {
    #[serde(default)]
    funcs: BTreeMap<String, FunctionMetadata>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum FunctionMetadata {
    JustDocs(Option<String>),
    Full {
        #[serde(default)]
        docs: Option<String>,
    },
}

impl FunctionMetadata {
    fn docs(&self) -> Option<&str> {
        match self {
            Self::JustDocs(docs) | Self::Full { docs } => docs.as_deref(),
        }
    }
}

/// The largest docs section read: docs are descriptions, not payloads.
const MAX_DOCS_BYTES: usize = 1 << 20;

impl PackageDocs {
    fn find(bytes: &[u8]) -> Self {
        let mut found = Vec::new();
        for payload in wasmparser::Parser::new(0).parse_all(bytes) {
            let Ok(wasmparser::Payload::CustomSection(section)) = payload else { continue };
            if section.name() != "package-docs" || section.data().len() > MAX_DOCS_BYTES {
                continue;
            }
            if let Some((0 | 1, json)) = section.data().split_first()
                && let Ok(metadata) = serde_json::from_slice::<PackageMetadata>(json)
            {
                found.push(metadata);
            }
        }
        Self(found)
    }

    /// The docs of function `name`, exported at the top level or by interface `interface`.
    fn function(&self, interface: Option<&str>, name: &str) -> Option<String> {
        fn in_interface<'a>(
            interfaces: &'a BTreeMap<String, InterfaceMetadata>,
            interface: Option<&str>,
            name: &str,
        ) -> Option<&'a str> {
            interfaces.get(interface?)?.funcs.get(name)?.docs()
        }
        let docs = self.0.iter().find_map(|package| {
            let in_interface = |interfaces| in_interface(interfaces, interface, name);
            match interface {
                Some(_) => in_interface(&package.interfaces).or_else(|| {
                    package.worlds.values().find_map(|world| {
                        in_interface(&world.interface_exports)
                            .or_else(|| in_interface(&world.inline_interfaces))
                    })
                }),
                None => package
                    .worlds
                    .values()
                    .find_map(|world| world.func_exports.get(name).or_else(|| world.funcs.get(name))?.docs()),
            }
        })?;
        let docs = docs.trim();
        (!docs.is_empty()).then(|| docs.to_owned())
    }
}
