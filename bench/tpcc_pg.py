"""TPC-C on PostgreSQL, for `bench/tpcc_bench.py`: the same tables and transactions as
`apps/tpcc`, each transaction one stored function in its own SERIALIZABLE transaction."""

from __future__ import annotations

import json
from typing import Any

import psycopg

from tpcc.dataflow import DISTRICTS, price_of

SCHEMA = """
CREATE TABLE warehouse (w_id int PRIMARY KEY, tax bigint, ytd bigint);
CREATE TABLE district (w_id int, d_id int, tax bigint, ytd bigint, next_o_id bigint,
  PRIMARY KEY (w_id, d_id));
CREATE TABLE customer (w_id int, d_id int, c_id int, credit text, discount bigint,
  balance bigint, ytd_payment bigint, payment_cnt bigint, delivery_cnt bigint,
  last_o_id bigint, PRIMARY KEY (w_id, d_id, c_id));
CREATE TABLE history (w_id int, d_id int, c_id int, n bigint, amount bigint,
  PRIMARY KEY (w_id, d_id, c_id, n));
CREATE TABLE item (i_id int PRIMARY KEY, price bigint, name text);
CREATE TABLE stock (w_id int, i_id int, quantity bigint, ytd bigint, order_cnt bigint,
  remote_cnt bigint, PRIMARY KEY (w_id, i_id));
CREATE TABLE orders (w_id int, d_id int, o_id bigint, c_id int, carrier_id int,
  ol_cnt int, all_local int, PRIMARY KEY (w_id, d_id, o_id));
CREATE TABLE new_order (w_id int, d_id int, o_id bigint, PRIMARY KEY (w_id, d_id, o_id));
CREATE TABLE order_line (w_id int, d_id int, o_id bigint, number int, i_id int,
  supply_w_id int, quantity int, amount bigint, delivered int,
  PRIMARY KEY (w_id, d_id, o_id, number));

CREATE FUNCTION take_stock(w int, i int, qty int, remote boolean) RETURNS void AS $$
  UPDATE stock SET quantity = CASE WHEN quantity - qty >= 10 THEN quantity - qty
                                   ELSE quantity - qty + 91 END,
    ytd = ytd + qty, order_cnt = order_cnt + 1, remote_cnt = remote_cnt + remote::int
  WHERE w_id = w AND i_id = i
$$ LANGUAGE sql;

CREATE FUNCTION new_order(w int, d int, c int, lines jsonb) RETURNS bigint AS $$
DECLARE o bigint; n int := 0; line jsonb; p bigint; all_local int := 1;
BEGIN
  UPDATE district SET next_o_id = next_o_id + 1 WHERE w_id = w AND d_id = d
    RETURNING next_o_id - 1 INTO o;
  FOR line IN SELECT * FROM jsonb_array_elements(lines) LOOP
    n := n + 1;
    SELECT price INTO p FROM item WHERE i_id = (line->>'i')::int;
    IF NOT FOUND THEN RAISE EXCEPTION 'unused_item' USING ERRCODE = 'P0001'; END IF;
    PERFORM take_stock((line->>'supply_w')::int, (line->>'i')::int, (line->>'qty')::int,
                       (line->>'supply_w')::int <> w);
    IF (line->>'supply_w')::int <> w THEN all_local := 0; END IF;
    INSERT INTO order_line VALUES (w, d, o, n, (line->>'i')::int, (line->>'supply_w')::int,
      (line->>'qty')::int, (line->>'qty')::int * p, 0);
  END LOOP;
  INSERT INTO orders VALUES (w, d, o, c, 0, n, all_local);
  INSERT INTO new_order VALUES (w, d, o);
  UPDATE customer SET last_o_id = o WHERE w_id = w AND d_id = d AND c_id = c;
  RETURN o;
END $$ LANGUAGE plpgsql;

CREATE FUNCTION payment(w int, d int, cw int, cd int, c int, amount bigint) RETURNS void AS $$
DECLARE cnt bigint;
BEGIN
  UPDATE warehouse SET ytd = ytd + amount WHERE w_id = w;
  UPDATE district SET ytd = ytd + amount WHERE w_id = w AND d_id = d;
  UPDATE customer SET balance = balance - amount, ytd_payment = ytd_payment + amount,
    payment_cnt = payment_cnt + 1 WHERE w_id = cw AND d_id = cd AND c_id = c
    RETURNING payment_cnt INTO cnt;
  INSERT INTO history VALUES (cw, cd, c, cnt, amount);
END $$ LANGUAGE plpgsql;

CREATE FUNCTION order_status(w int, d int, c int) RETURNS bigint AS $$
  SELECT count(*) FROM order_line ol JOIN customer cu
    ON ol.w_id = cu.w_id AND ol.d_id = cu.d_id AND ol.o_id = cu.last_o_id
  WHERE cu.w_id = w AND cu.d_id = d AND cu.c_id = c
$$ LANGUAGE sql STABLE;

CREATE FUNCTION delivery(w int, carrier int) RETURNS int AS $$
DECLARE d int; o bigint; c int; total bigint; delivered int := 0;
BEGIN
  FOR d IN 1..10 LOOP
    SELECT min(o_id) INTO o FROM new_order WHERE w_id = w AND d_id = d;
    CONTINUE WHEN o IS NULL;
    DELETE FROM new_order WHERE w_id = w AND d_id = d AND o_id = o;
    UPDATE orders SET carrier_id = carrier WHERE w_id = w AND d_id = d AND o_id = o
      RETURNING c_id INTO c;
    UPDATE order_line SET delivered = 1 WHERE w_id = w AND d_id = d AND o_id = o;
    SELECT sum(amount) INTO total FROM order_line WHERE w_id = w AND d_id = d AND o_id = o;
    UPDATE customer SET balance = balance + total, delivery_cnt = delivery_cnt + 1
      WHERE w_id = w AND d_id = d AND c_id = c;
    delivered := delivered + 1;
  END LOOP;
  RETURN delivered;
END $$ LANGUAGE plpgsql;

CREATE FUNCTION stock_level(w int, d int, threshold int) RETURNS bigint AS $$
  SELECT count(DISTINCT s.i_id) FROM district di
    JOIN order_line ol ON ol.w_id = di.w_id AND ol.d_id = di.d_id
      AND ol.o_id >= di.next_o_id - 20 AND ol.o_id < di.next_o_id
    JOIN stock s ON s.w_id = ol.w_id AND s.i_id = ol.i_id AND s.quantity < threshold
  WHERE di.w_id = w AND di.d_id = d
$$ LANGUAGE sql STABLE;
"""


def load(dsn: str, warehouses: int, items: int, customers: int) -> None:
    """The same rows `apps/tpcc`'s load transactions write."""
    with psycopg.connect(dsn) as conn:
        conn.execute(SCHEMA)
        with conn.cursor() as cur:
            with cur.copy("COPY item FROM STDIN") as copy:
                for i in range(1, items + 1):
                    copy.write_row([i, price_of(i), f"item{i}"])
            for w in range(1, warehouses + 1):
                cur.execute("INSERT INTO warehouse VALUES (%s, %s, 0)", (w, 100 + w % 1900))
                with cur.copy("COPY stock FROM STDIN") as copy:
                    for i in range(1, items + 1):
                        copy.write_row([w, i, 10 + (w + i) % 91, 0, 0, 0])
                for d in range(1, DISTRICTS + 1):
                    cur.execute("INSERT INTO district VALUES (%s, %s, %s, 0, 1)",
                                (w, d, 100 + (w * d) % 1900))  # fmt: skip
                    with cur.copy("COPY customer FROM STDIN") as copy:
                        for c in range(1, customers + 1):
                            credit = "BC" if c % 10 == 0 else "GC"
                            copy.write_row([w, d, c, credit, c % 5000, -1000, 1000, 1, 0, 0])
        conn.execute("ANALYZE")


def run(conn: psycopg.Connection[Any], kind: str, p: dict[str, Any]) -> bool:
    """One transaction; False if it rolled back by the specification (an unused item)."""
    if kind == "new_order":
        try:
            conn.execute("SELECT new_order(%s, %s, %s, %s)",
                         (p["w"], p["d"], p["c"], json.dumps(p["lines"])))  # fmt: skip
        except psycopg.errors.RaiseException:
            conn.rollback()
            return False
    elif kind == "payment":
        conn.execute("SELECT payment(%s, %s, %s, %s, %s, %s)",
                     (p["w"], p["d"], p["cw"], p["cd"], p["c"], p["amount"]))  # fmt: skip
    elif kind == "order_status":
        conn.execute("SELECT order_status(%s, %s, %s)", (p["w"], p["d"], p["c"])).fetchone()
    elif kind == "delivery":
        conn.execute("SELECT delivery(%s, %s)", (p["w"], p["carrier"])).fetchone()
    else:
        conn.execute("SELECT stock_level(%s, %s, %s)", (p["w"], p["d"], p["threshold"])).fetchone()
    conn.commit()
    return True


CHECKS = {
    "W_YTD = sum(D_YTD)": """SELECT count(*) FROM warehouse w WHERE w.ytd <>
        (SELECT sum(ytd) FROM district d WHERE d.w_id = w.w_id)""",
    "D_NEXT_O_ID - 1 = max(O_ID) = max(NO_O_ID)": """SELECT count(*) FROM district d WHERE
        d.next_o_id - 1 <> coalesce((SELECT max(o_id) FROM orders o
          WHERE o.w_id = d.w_id AND o.d_id = d.d_id), 0)
        OR d.next_o_id - 1 < coalesce((SELECT max(o_id) FROM new_order n
          WHERE n.w_id = d.w_id AND n.d_id = d.d_id), 0)""",
    "max(NO_O_ID) - min(NO_O_ID) + 1 = count(NO)": """SELECT count(*) FROM (SELECT w_id, d_id
        FROM new_order GROUP BY w_id, d_id HAVING max(o_id) - min(o_id) + 1 <> count(*)) x""",
    "sum(O_OL_CNT) = count(OL)": """SELECT count(*) FROM district d WHERE
        coalesce((SELECT sum(ol_cnt) FROM orders o WHERE o.w_id = d.w_id AND o.d_id = d.d_id), 0)
        <> (SELECT count(*) FROM order_line l WHERE l.w_id = d.w_id AND l.d_id = d.d_id)""",
}


def violations(dsn: str) -> list[str]:
    """The consistency conditions (TPC-C 3.3.2.1-4) the database breaks, by name."""
    with psycopg.connect(dsn) as conn:
        return [name for name, sql in CHECKS.items() if (conn.execute(sql).fetchone() or [0])[0]]
