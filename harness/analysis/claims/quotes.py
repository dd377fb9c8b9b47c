"""The lessons' own words (Spanish) for every claim, by the judge's name: claims.csv's quote
column. A claim the lessons do not state in words (one asked of today's models) has none.
"""

from __future__ import annotations


# the lesson's own words, in its language, for every row (claims.csv's quote column)
QUOTES = {
    "additive_hand_weights": "con pesos de 0.74 y 0.81. La de a, la siguiente, deja esa misma "
                             "posición en 0.05",
    "additive_no_bias": "El sesgo sobra porque sumaría el mismo número a toda la fila, y una "
                        "constante por fila no sobrevive al softmax.",
    "additive_param_count": "Cuenta los pesos: 2 d_a d_h + d_a. No aparece T_x, no aparece T_y",
    "additive_widths_differ": "Nada de esto obliga además a que el encoder y el decoder midan lo "
                              "mismo",
    "additive_no_tanh_same_rows": "Los T_y pasos reciben la misma fila de pesos",
    "additive_score_rows_sum_to_zero": "los pesos suman 1, así que subir uno es bajar los demás",
    "additive_routes_skip_whh": "no multiplican por W^enc_hh ni una sola vez y su longitud no "
                                "crece cuando j se aleja",
    "additive_untrained_uniform": "el mayor peso de cada fila ronda 0.18 cuando el reparto "
                                  "uniforme sería 0.167",
    "additive_routes_sum": "sumadas, las dos rutas reproducen el gradiente numérico hasta el orden "
                           "de 10^-10, y por separado cada una se equivoca en la primera cifra",
    "additive_routes": "norma de la ruta del valor / de la puntuacion (2.8303, 0.2556)",
    "additive_eleven_times": "la ruta del valor es once veces mayor que la de la puntuación",
    "additive_va_sharpens": "Cambia la escala de va a 2.0 [...] los pesos se afilan y las dos "
                            "normas se acercan",
    "additive_cost_counts": "T_x + T_y productos—, pero la suma, el tanh y v_a hay que repetirlos "
                            "T_x · T_y veces",
    "additive_no_big_product": "ninguna de las operaciones que los producen es un producto de "
                               "matrices grande",
    "figure1_three_boxes_mix": "de las quince cajas, se iluminan tres",
    "depth_in_sequence": "leerla son 800 pasos que ocurren uno después de otro",
    "scan_parallelises": "la profundidad de la cadena [...] es T",
    "processors_change_nothing": "comprar una máquina con 800 procesadores no cambia nada",
    "input_half_parallel": "los T productos se pueden calcular a la vez [...] El primero sí espera",
    "attention_constant_stages": "Tres operaciones en fila, y ese tres no se mueve cuando el texto "
                                 "se alarga",
    "vanishing_with_radius": "apaga la señal si su radio espectral es menor que 1 y la dispara si "
                             "es mayor",
    "tanh_makes_it_worse": "la saturación del tanh solo agrava lo primero",
    "clipping_stops_explosion_only": "el recorte del gradiente frena la explosión pero no rescata "
                                     "lo desvanecido",
    "gates_did_not_shorten": "la LSTM [...] y la GRU [...] no acortaron ese camino",
    "gates_made_it_survivable": "le abrieron una vía aditiva al lado para que sobreviviera el viaje",
    "attention_one_factor": "delante lleva un solo factor: α_T1. Uno, no T−1",
    "counts_cross_at_d": "se cruzan cuando T = d, y no antes",
    "layer_quadratic_from_d": "La rejilla cuesta menos que la recurrencia mientras la frase mida "
                              "menos que el modelo",
    "big_product_finishes_first": "Una cuenta grande que cabe en un solo producto de matrices se "
                                  "resuelve antes que una cuenta pequeña partida en T esperas.",
    "kv_shuffle_invariance": "si barajas las filas de K y V, las salidas se barajan igual y ningún "
                             "número cambia",
    "work_at_50": "2 · 50 · 512² = 26 214 400 [...] 2 560 000 [...] Diez veces menos trabajo",
    "work_at_1000_2000": "La razón entre los dos es 1 000/512 ≈ 1.95 [...] comprueba que sale 3.9",
    "diagonal_without_projections": "Cada posición se daría a sí misma el peso más alto, en todas "
                                    "las filas a la vez",
    "projections_widget": "Encendidas, la fila de están se va a buscar llaves por encima de todo "
                          "lo demás",
    "map_square_rows_one": "A ∈ R^{T×T} es cuadrada [...] Cada fila sigue sumando 1",
    "params_without_T": "Cambia T a 9 [...] la línea de los parámetros no se mueve",
    "heads_cost_is_flat": "de repartir la anchura, d_k = d_model/h, sale que el coste no depende "
                          "de h",
    "scores_symmetric_weights_not": "la rejilla de puntuaciones es simétrica. Los pesos no lo son",
    "longer_closes_on_diagonal": "cuanto mayor es r, más se cierra la fila sobre su diagonal",
    "longest_takes_the_row": "la fila se la lleva entonces la posición cuyo vector sea más largo",
    "length_one_nearly_even": "con longitud 1 la fila reparte casi por igual, y estirando los "
                              "mismos vectores el peso propio se dispara",
    "projections_look_elsewhere": "Con dos lecturas distintas de la misma matriz eso se acaba",
    "unscaled_saturates": "con d_k = 8 el mayor peso de una fila se queda en 0.558, y [...] a "
                          "d_k = 512 sube a 0.983",
    "sqrt_dk": "Dividiendo entre √d_k el máximo también crece, pero despacio, de 0.330 a 0.486",
    "saturation_gradient": "la saturación que apaga un reparto y el gradiente que se desvanece "
                           "cuando lo atraviesa",
}
