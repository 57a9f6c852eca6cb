"""Recursive-descent parser for Lua 5.4, producing `nodes` with positions.

Follows the grammar of the Lua 5.4 reference manual (§9) and the operator priorities of
lparser.c, and raises `LuaSyntaxError` with lparser.c's wording, so a message reads the same
as the one the real compiler gives but carries a column too.
"""

from __future__ import annotations

from scrun_lua_check import nodes as n
from scrun_lua_check.lexer import Comment, Kind, LuaSyntaxError, Token, tokenize

# (left, right) priority of binary operators, from lparser.c; right < left: right-associative.
BINARY_PRIORITY: dict[str, tuple[int, int]] = {
    "or": (1, 1), "and": (2, 2),
    "<": (3, 3), ">": (3, 3), "<=": (3, 3), ">=": (3, 3), "~=": (3, 3), "==": (3, 3),
    "|": (4, 4), "~": (5, 5), "&": (6, 6), "<<": (7, 7), ">>": (7, 7),
    "..": (9, 8), "+": (10, 10), "-": (10, 10),
    "*": (11, 11), "/": (11, 11), "//": (11, 11), "%": (11, 11),
    "^": (14, 13),
}  # fmt: skip
UNARY_OPERATORS = ("not", "-", "#", "~")
UNARY_PRIORITY = 12
BLOCK_END = ("else", "elseif", "end", "until")


class Parser:
    """One parse of one token list."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.index = 0
        self.loop_depth = 0  # `break` outside a loop is a compile error in Lua
        self.in_vararg = True  # so is `...` outside a vararg function (the chunk is one)

    # ---- token helpers ----

    @property
    def tok(self) -> Token:
        return self.tokens[self.index]

    def peek(self, offset: int = 1) -> Token:
        return self.tokens[min(self.index + offset, len(self.tokens) - 1)]

    def advance(self) -> Token:
        token = self.tok
        if token.kind is not Kind.EOF:
            self.index += 1
        return token

    def is_(self, text: str) -> bool:
        """True when the current token is the keyword or symbol `text`."""
        return self.tok.kind in (Kind.KEYWORD, Kind.SYMBOL) and self.tok.text == text

    def accept(self, text: str) -> bool:
        if self.is_(text):
            self.advance()
            return True
        return False

    def error(self, message: str, token: Token | None = None) -> LuaSyntaxError:
        token = token or self.tok
        return LuaSyntaxError(f"{message} near {token.near()}", token.line, token.col)

    def expect(self, text: str) -> Token:
        if not self.is_(text):
            raise self.error(f"'{text}' expected")
        return self.advance()

    def expect_match(self, text: str, opener: str, opener_line: int) -> None:
        """Closing keyword of a construct; names the opener when it is on another line."""
        if self.is_(text):
            self.advance()
            return
        if opener_line == self.tok.line:
            raise self.error(f"'{text}' expected")
        raise self.error(f"'{text}' expected (to close '{opener}' at line {opener_line})")

    def name(self) -> Token:
        if self.tok.kind is not Kind.NAME:
            raise self.error("<name> expected")
        return self.advance()

    def block_follows(self) -> bool:
        return self.tok.kind is Kind.EOF or (
            self.tok.kind is Kind.KEYWORD and self.tok.text in BLOCK_END
        )

    # ---- blocks and statements ----

    def chunk(self) -> n.Chunk:
        first = self.tok
        body = self.block()
        if self.tok.kind is not Kind.EOF:
            raise self.error("'<eof>' expected")
        return n.Chunk(first.line, first.col, body)

    def block(self) -> n.Block:
        first = self.tok
        statements: list[n.Node] = []
        while not self.block_follows():
            if self.is_("return"):
                statements.append(self.return_stat())
                break
            statement = self.statement()
            if statement is not None:
                statements.append(statement)
        return n.Block(first.line, first.col, statements)

    def return_stat(self) -> n.Return:
        token = self.advance()
        values: list[n.Node] = []
        if not self.block_follows() and not self.is_(";"):
            values = self.expr_list()
        self.accept(";")
        return n.Return(token.line, token.col, values)

    def statement(self) -> n.Node | None:
        token = self.tok
        if self.accept(";"):
            return None
        if token.kind is Kind.KEYWORD:
            handler = {
                "if": self.if_stat,
                "while": self.while_stat,
                "do": self.do_stat,
                "for": self.for_stat,
                "repeat": self.repeat_stat,
                "function": self.function_stat,
                "local": self.local_stat,
                "break": self.break_stat,
                "goto": self.goto_stat,
            }.get(token.text)
            if handler is not None:
                return handler()
        if self.is_("::"):
            self.advance()
            label = self.name()
            self.expect("::")
            return n.Label(token.line, token.col, label.text)
        return self.expr_stat()

    def if_stat(self) -> n.If:
        start = self.advance()
        clauses: list[tuple[n.Node, n.Block]] = []
        cond = self.expr()
        self.expect("then")
        clauses.append((cond, self.block()))
        orelse: n.Block | None = None
        while self.is_("elseif"):
            self.advance()
            cond = self.expr()
            self.expect("then")
            clauses.append((cond, self.block()))
        if self.accept("else"):
            orelse = self.block()
        self.expect_match("end", "if", start.line)
        return n.If(start.line, start.col, clauses, orelse)

    def loop_body(self) -> n.Block:
        self.loop_depth += 1
        body = self.block()
        self.loop_depth -= 1
        return body

    def while_stat(self) -> n.While:
        start = self.advance()
        cond = self.expr()
        self.expect("do")
        body = self.loop_body()
        self.expect_match("end", "while", start.line)
        return n.While(start.line, start.col, cond, body)

    def do_stat(self) -> n.Do:
        start = self.advance()
        body = self.block()
        self.expect_match("end", "do", start.line)
        return n.Do(start.line, start.col, body)

    def repeat_stat(self) -> n.Repeat:
        start = self.advance()
        body = self.loop_body()
        self.expect_match("until", "repeat", start.line)
        return n.Repeat(start.line, start.col, body, self.expr())

    def for_stat(self) -> n.Node:
        start = self.advance()
        first = self.name()
        first_name = n.LocalName(first.line, first.col, first.text)
        if self.accept("="):
            begin = self.expr()
            self.expect(",")
            stop = self.expr()
            step = self.expr() if self.accept(",") else None
            self.expect("do")
            body = self.loop_body()
            self.expect_match("end", "for", start.line)
            return n.NumericFor(start.line, start.col, first_name, begin, stop, step, body)
        if not self.is_(",") and not self.is_("in"):
            raise self.error("'=' or 'in' expected")
        names = [first_name]
        while self.accept(","):
            token = self.name()
            names.append(n.LocalName(token.line, token.col, token.text))
        self.expect("in")
        exprs = self.expr_list()
        self.expect("do")
        body = self.loop_body()
        self.expect_match("end", "for", start.line)
        return n.GenericFor(start.line, start.col, names, exprs, body)

    def function_stat(self) -> n.FunctionStat:
        start = self.advance()
        token = self.name()
        target: n.Node = n.Name(token.line, token.col, token.text)
        is_method = False
        while self.is_(".") or self.is_(":"):
            is_method = self.advance().text == ":"
            key = self.name()
            target = n.Index(key.line, key.col, target, n.String(key.line, key.col, key.text), True)
            if is_method:
                break
        label = n.describe(target)
        if is_method:
            label = label[: label.rfind(".")] + ":" + label[label.rfind(".") + 1 :]
        func = self.function_body(start, is_method, label)
        return n.FunctionStat(start.line, start.col, target, is_method, func)

    def local_stat(self) -> n.Node:
        start = self.advance()
        if self.is_("function"):
            self.advance()
            token = self.name()
            name = n.LocalName(token.line, token.col, token.text)
            return n.LocalFunction(
                start.line, start.col, name, self.function_body(start, False, name.name)
            )
        names = [self.local_name()]
        while self.accept(","):
            names.append(self.local_name())
        values = self.expr_list() if self.accept("=") else []
        return n.Local(start.line, start.col, names, values)

    def local_name(self) -> n.LocalName:
        token = self.name()
        attrib = None
        if self.accept("<"):
            attrib_token = self.name()
            if attrib_token.text not in ("const", "close"):
                raise LuaSyntaxError(
                    f"unknown attribute '{attrib_token.text}'", attrib_token.line, attrib_token.col
                )
            attrib = attrib_token.text
            self.expect(">")
        return n.LocalName(token.line, token.col, token.text, attrib)

    def break_stat(self) -> n.Break:
        token = self.advance()
        if self.loop_depth == 0:
            raise LuaSyntaxError(
                f"break outside a loop at line {token.line}", token.line, token.col
            )
        return n.Break(token.line, token.col)

    def goto_stat(self) -> n.Goto:
        token = self.advance()
        return n.Goto(token.line, token.col, self.name().text)

    def expr_stat(self) -> n.Node:
        first = self.tok
        expr = self.suffixed_expr()
        if self.is_("=") or self.is_(","):
            targets = [expr]
            while self.accept(","):
                targets.append(self.suffixed_expr())
            for target in targets:
                if not isinstance(target, (n.Name, n.Index)):
                    raise self.error("syntax error")
            self.expect("=")
            return n.Assign(first.line, first.col, targets, self.expr_list())
        if not isinstance(expr, (n.Call, n.MethodCall)):
            raise self.error("syntax error")
        return n.CallStat(first.line, first.col, expr)

    # ---- functions ----

    def function_body(self, start: Token, is_method: bool, name: str) -> n.Function:
        params: list[n.Param] = []
        if is_method:
            params.append(n.Param(start.line, start.col, "self", implicit=True))
        self.expect("(")
        is_vararg = False
        if not self.is_(")"):
            while True:
                if self.is_("..."):
                    self.advance()
                    is_vararg = True
                    break
                if self.tok.kind is not Kind.NAME:
                    raise self.error("<name> expected")
                token = self.advance()
                params.append(n.Param(token.line, token.col, token.text))
                if not self.accept(","):
                    break
        self.expect(")")
        outer = self.loop_depth, self.in_vararg
        self.loop_depth, self.in_vararg = 0, is_vararg  # `break` cannot leave a function
        body = self.block()
        self.loop_depth, self.in_vararg = outer
        end = self.tok
        self.expect_match("end", "function", start.line)
        return n.Function(start.line, start.col, params, is_vararg, body, end.line, end.col, name)

    # ---- expressions ----

    def expr_list(self) -> list[n.Node]:
        exprs = [self.expr()]
        while self.accept(","):
            exprs.append(self.expr())
        return exprs

    def expr(self, limit: int = 0) -> n.Node:
        token = self.tok
        left: n.Node
        if token.kind in (Kind.KEYWORD, Kind.SYMBOL) and token.text in UNARY_OPERATORS:
            self.advance()
            operand = self.expr(UNARY_PRIORITY)
            left = n.UnOp(token.line, token.col, token.text, operand)
        else:
            left = self.simple_expr()
        while True:
            op = self.tok
            priority = (
                BINARY_PRIORITY.get(op.text) if op.kind in (Kind.KEYWORD, Kind.SYMBOL) else None
            )
            if priority is None or priority[0] <= limit:
                return left
            self.advance()
            right = self.expr(priority[1])
            left = n.BinOp(left.line, left.col, op.text, left, right)

    def simple_expr(self) -> n.Node:
        token = self.tok
        if token.kind is Kind.NUMBER:
            self.advance()
            assert isinstance(token.value, (int, float))
            return n.Number(token.line, token.col, token.value)
        if token.kind is Kind.STRING:
            self.advance()
            return n.String(token.line, token.col, str(token.value))
        if self.accept("nil"):
            return n.Nil(token.line, token.col)
        if self.accept("true") or self.accept("false"):
            return n.Boolean(token.line, token.col, token.text == "true")
        if self.is_("..."):
            if not self.in_vararg:
                raise self.error("cannot use '...' outside a vararg function")
            self.advance()
            return n.Vararg(token.line, token.col)
        if self.is_("{"):
            return self.table()
        if self.accept("function"):
            return self.function_body(token, False, "function")
        return self.suffixed_expr()

    def primary_expr(self) -> n.Node:
        token = self.tok
        if token.kind is Kind.NAME:
            self.advance()
            return n.Name(token.line, token.col, token.text)
        if self.accept("("):
            inner = self.expr()
            self.expect_match(")", "(", token.line)
            return n.Paren(token.line, token.col, inner)
        raise self.error("unexpected symbol")

    def suffixed_expr(self) -> n.Node:
        """Primary expression with `.name`, `[key]`, `:method(args)` and call suffixes.

        Index and call nodes take the position where the whole expression starts, so a
        diagnostic about `slurm.remote_command(...)` points at `slurm`.
        """
        expr = self.primary_expr()
        while True:
            token = self.tok
            if self.accept("."):
                key = self.name()
                key_node = n.String(key.line, key.col, key.text)
                expr = n.Index(expr.line, expr.col, expr, key_node, True)
            elif self.accept("["):
                key_expr = self.expr()
                self.expect("]")
                expr = n.Index(expr.line, expr.col, expr, key_expr)
            elif self.accept(":"):
                method = self.name()
                expr = n.MethodCall(expr.line, expr.col, expr, method.text, self.call_args())
            elif self.is_("(") or self.is_("{") or token.kind is Kind.STRING:
                expr = n.Call(expr.line, expr.col, expr, self.call_args())
            else:
                return expr

    def call_args(self) -> list[n.Node]:
        token = self.tok
        if token.kind is Kind.STRING:
            self.advance()
            return [n.String(token.line, token.col, str(token.value))]
        if self.is_("{"):
            return [self.table()]
        if not self.accept("("):
            raise self.error("function arguments expected")
        args = [] if self.is_(")") else self.expr_list()
        self.expect_match(")", "(", token.line)
        return args

    def table(self) -> n.Table:
        start = self.expect("{")
        entries: list[n.TableField] = []
        while not self.is_("}"):
            token = self.tok
            if self.accept("["):
                key: n.Node | None = self.expr()
                self.expect("]")
                self.expect("=")
            elif (
                token.kind is Kind.NAME
                and self.peek().text == "="
                and self.peek().kind is Kind.SYMBOL
            ):
                self.advance()
                self.advance()
                key = n.String(token.line, token.col, token.text)
            else:
                key = None
            entries.append(n.TableField(token.line, token.col, key, self.expr()))
            if not (self.accept(",") or self.accept(";")):
                break
        self.expect_match("}", "{", start.line)
        return n.Table(start.line, start.col, entries)


def parse(source: str) -> tuple[n.Chunk, list[Comment]]:
    """Parse Lua 5.4 source into a linked AST; raises LuaSyntaxError. Also returns the comments."""
    tokens, comments = tokenize(source)
    chunk = Parser(tokens).chunk()
    n.link(chunk)
    return chunk, comments
